"""The "Noam" learning-rate schedule of §5.3: linear warmup, then inverse-sqrt decay."""

from torch.optim.lr_scheduler import LambdaLR


def noam_lr(step, d_model, warmup=4000, factor=1.0):
    """factor * d_model**-0.5 * min(n**-0.5, n * warmup**-1.5), with n = step + 1.

    The paper's formula uses n = step, which at step 0 (the first call a PyTorch
    scheduler makes) raises ZeroDivisionError for ints or gives inf for floats
    (0 ** -0.5). Counting from n = step + 1 makes step 0 safe; the rate peaks at
    step == warmup - 1 and ``noam_lr(step)`` equals the paper's rate at step + 1.
    """
    n = step + 1
    return factor * d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)


def noam_schedule(optimizer, d_model=32, warmup=4000, factor=1.0):
    """A LambdaLR that sets the learning rate to ``noam_lr(step, ...)``.

    LambdaLR multiplies the optimizer's base lr by the lambda, and the lambda
    here already returns the absolute rate, so build the optimizer with lr=1.0.
    The paper uses Adam with betas=(0.9, 0.98), eps=1e-9::

        opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
        sched = noam_schedule(opt, d_model=model.config.d_model)
        # per step: opt.step(); sched.step()
    """
    return LambdaLR(optimizer, lambda step: noam_lr(step, d_model, warmup, factor))
