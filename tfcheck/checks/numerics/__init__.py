"""Numerics checks: attention scale and softmax axis, NaN sources, half precision, embedding scale."""
