"""Transforms of traced graphs: reverse mode (autodiff, through control flow in scan_vjp),
batching (vmap), and the caches that remember what a transform built (vjp, walk and
composite templates)."""
