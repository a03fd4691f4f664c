"""Information-flow checks: batch independence, position sensitivity, cross-attention dependence."""
