"""`la.nn`: modules, layers, initializers, the functional forms, and weight files."""
from . import functional, init
from .layers import (AvgPool2d, BatchNorm1d, BatchNorm2d, Conv2d, Dropout, Embedding, Flatten,
                     GELU, Identity, LayerNorm, Linear, MaxPool2d, MultiheadAttention, ReLU,
                     Sequential, Sigmoid, Softmax, Tanh, count_parameters)
from .module import Module, Parameter
from .serialization import load, load_npz, load_safetensors, save, save_npz, save_safetensors

__all__ = ["functional", "init", "Module", "Parameter", "AvgPool2d", "BatchNorm1d",
           "BatchNorm2d", "Conv2d", "Dropout", "Embedding", "Flatten", "GELU", "Identity",
           "LayerNorm", "Linear", "MaxPool2d", "MultiheadAttention", "ReLU", "Sequential",
           "Sigmoid", "Softmax", "Tanh", "count_parameters", "save", "load", "save_npz",
           "load_npz", "save_safetensors", "load_safetensors"]
