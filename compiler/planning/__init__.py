"""Planning a module's execution: fusion (and row fusion) into kernels, the plan of each
reduction, buffer assignment, and what each kernel costs and where its ops came from."""
