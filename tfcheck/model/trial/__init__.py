"""Stage 3 of the model layer, **trial**: the facts only a forward shows, settled by one recorded forward.

Runs once per model, after the facts and before the first check (the engine runs its forwards, counted in
``forward.smoke``): the layout of a mask the forward requires, the look-ahead mask the caller builds and the op
it reaches, which tensor of the return value is the output (a flattened one read back, a head the forward never
calls), the longest length the model holds, a (length, batch) layout, a causal mask the model builds itself.
``observed`` reads these off the recorded forward; each rule of ``trial.ADOPTERS`` turns one reading into a
fact with its evidence. A reading under which the model raises is tfcheck's to change, never a finding.
"""
