"""The flat node state: replicas are views into one [n, P] tensor."""

import torch
from torch import nn

from lpdt.decentral.state import NodeState


class Ranged(nn.Module):
    """A layer with a gossiped buffer and a local one (like an 8-bit range observer + BN stats)."""

    gossip_buffers = ("running_max",)

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.register_buffer("running_max", torch.zeros(1))
        self.register_buffer("local_count", torch.zeros(1))

    def forward(self, x):
        if self.training:
            self.running_max.mul_(0.5).add_(0.5 * x.detach().max())
            self.local_count.add_(1)
        return self.lin(x)


def make():
    torch.manual_seed(0)
    return nn.Sequential(Ranged(), nn.BatchNorm1d(3))


def test_layout_identical_init_and_views():
    st = NodeState(make(), 3)
    assert st.p_train == 4 * 3 + 3 + 3 + 3  # linear + BN affine
    assert st.p_total == st.p_train + 1  # + the gossiped range
    assert [s.trainable for s in st.segments][-1] is False
    assert torch.equal(st.x[0], st.x[1]) and torch.equal(st.x[1], st.x[2])
    # writing into x changes the model, and vice versa
    st.x[1, 0] = 42.0
    assert st.models[1][0].lin.weight.view(-1)[0] == 42.0
    assert st.models[0][0].lin.weight.view(-1)[0] != 42.0


def test_gradients_land_in_flat_grad_and_buffers_update_in_x():
    st = NodeState(make(), 2)
    st.train()
    x = torch.randn(8, 4)
    st.models[1](x).sum().backward()
    assert st.grad[0].abs().sum() == 0
    assert st.grad[1].abs().sum() > 0
    assert torch.equal(st.grad[1, :12].view(3, 4), st.models[1][0].lin.weight.grad)
    assert st.x[1, -1] == 0.5 * x.max()  # the gossiped buffer is row 1's last entry
    assert st.x[0, -1] == 0.0
    # BatchNorm running statistics stay local
    local = st.local_buffers(1)
    assert "1.running_mean" in local and "0.local_count" in local
    assert "0.running_max" not in local


def test_average_model_of_the_debiased_rows():
    """What the evaluation does (``Run.evaluate_all``): the average of the de-biased rows z_i / w_i
    as a standalone model, which does not alias the node state."""
    st = NodeState(make(), 4)
    torch.manual_seed(1)
    st.x.add_(torch.randn_like(st.x))
    st.w.copy_(torch.tensor([0.5, 1.0, 1.5, 1.0]))
    z = st.debiased_rows()
    assert torch.allclose(z, st.x / st.w[:, None])
    avg = st.model_from(z.mean(0), st.local_float_buffers().mean(0))
    flat = torch.cat([p.detach().reshape(-1) for p in avg.parameters()])
    assert torch.allclose(flat, (st.x / st.w[:, None])[:, : st.p_train].mean(0), atol=1e-6)
    before = st.x.clone()
    next(avg.parameters()).data.add_(1.0)
    assert torch.equal(st.x, before)


def test_gossip_adds_the_correction_and_takes_the_mixed_weights():
    """The state owns z and w: ``gossip(algo)`` applies the algorithm's correction and mixed
    weights (here plain push-sum on an irregular graph, where w really changes)."""
    from lpdt.decentral.algorithms import make_algorithm
    from lpdt.decentral.compression import LayerwiseCompressor
    from lpdt.decentral.topology import matrix_from_peers

    st = NodeState(make(), 4)
    torch.manual_seed(2)
    st.x.add_(torch.randn_like(st.x))
    w_mat = matrix_from_peers([[1, 2, 3], [2], [3], [0]]).float()
    comp = LayerwiseCompressor([(s.offset, s.numel) for s in st.segments], "none", 0.0)
    algo = make_algorithm("sgp", w_mat, comp, 1.0, st.x)
    x0, w0, w_obj = st.x.clone(), st.w.clone(), st.w
    delta = st.gossip(algo)
    assert torch.allclose(st.x, w_mat @ x0, atol=1e-6) and torch.allclose(delta, st.x - x0)
    assert torch.allclose(st.w, w_mat @ w0) and st.w is w_obj  # updated in place, by the state
    assert torch.equal(st.debias(delta), delta / st.w[:, None])


def test_gpu_rows_start_16_byte_aligned_and_cpu_rows_stay_contiguous():
    """On a GPU every row of x starts on a 16-byte boundary, so each tensor has the same
    alignment in every replica (the compiled step assumes the first call's); on the CPU the
    rows are packed as before. (The GPU path itself: tests/test_cuda.py.)"""
    from lpdt.decentral.state import GPU_ROW_ALIGN, row_stride

    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert [row_stride(p, cuda) for p in (1, 4, 5, 1562)] == [4, 4, 8, 1564]
    assert all(row_stride(p, cuda) % GPU_ROW_ALIGN == 0 for p in range(1, 50))
    assert [row_stride(p, cpu) for p in (1, 5, 1562)] == [1, 5, 1562]
