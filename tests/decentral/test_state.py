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


def _trained(nodes: int = 4) -> NodeState:
    """A state whose rows, weights and local buffers differ from node to node (one training
    forward per node on its own input: BatchNorm statistics and counters move)."""
    st = NodeState(make(), nodes)
    torch.manual_seed(3)
    st.x.add_(torch.randn_like(st.x))
    st.w.copy_(torch.tensor([0.3, 1.0, 1.7, 0.9][:nodes]))
    st.train()
    with torch.no_grad():
        for i, m in enumerate(st.models):
            m(torch.randn(8, 4) + i)
    return st


def test_state_dict_round_trip_restores_rows_weights_and_local_buffers_exactly():
    """``state_dict`` / ``load_state_dict`` (what ``Run.checkpoint`` / ``restore`` use): through
    ``torch.save`` and back into a state that has moved on, bit for bit, in place."""
    import io

    st = _trained()
    assert set(st.state_dict()) == {"x", "w", "local_buffers"}  # the Checkpoint's field names
    buf = io.BytesIO()
    torch.save(st.state_dict(), buf)
    x0, w0 = st.x.clone(), st.w.clone()
    local0 = [{k: v.clone() for k, v in st.local_buffers(i).items()} for i in range(st.nodes)]
    # move everything on: rows, weights, local buffers
    st.x.mul_(1.5).add_(0.25)
    st.w.copy_(torch.tensor([2.0, 0.5, 0.5, 1.0]))
    with torch.no_grad():
        for m in st.models:
            m(torch.randn(8, 4) * 3)
    assert not torch.equal(st.local_buffers(2)["1.running_mean"], local0[2]["1.running_mean"])
    x_obj = st.x
    buf.seek(0)
    st.load_state_dict(torch.load(buf))
    assert torch.equal(st.x, x0) and torch.equal(st.w, w0) and st.x is x_obj
    for i in range(st.nodes):
        mine = st.local_buffers(i)
        assert mine.keys() == local0[i].keys()
        assert all(torch.equal(mine[k], v) for k, v in local0[i].items())
    # the replicas still are views of the rows
    st.x[2, 0] = 7.0
    assert st.models[2][0].lin.weight.view(-1)[0] == 7.0


def test_preserved_restores_the_rows_bit_for_bit_after_a_debias():
    """``x / w * w`` is not always ``x`` in the last bit; ``preserved`` puts the bits back."""
    st = _trained()
    before = st.x.clone()
    with st.debiased():
        pass
    assert not torch.equal(st.x, before)  # the round trip alone changes some bits
    st.x.copy_(before)
    with st.preserved(), st.debiased():
        st.models[1](torch.randn(8, 4))  # a training forward moves the gossiped range too
    assert torch.equal(st.x, before)
    st.x[1, 0] = 5.0  # still the replicas' rows
    assert st.models[1][0].lin.weight.view(-1)[0] == 5.0


def test_zero_grad_zeroes_every_replicas_gradient_in_place():
    st = _trained(2)
    for m in st.models:
        m(torch.randn(8, 4)).sum().backward()
    grad_obj = st.grad
    assert st.grad.abs().sum(1).gt(0).all()
    st.zero_grad()
    assert st.grad is grad_obj and not st.grad.any()
    assert not st.models[1][0].lin.weight.grad.any()
    st.models[1](torch.randn(8, 4)).sum().backward()  # the gradients still land in the rows
    assert torch.equal(st.grad[1, :12].view(3, 4), st.models[1][0].lin.weight.grad)
    assert not st.grad[0].any()


def test_average_is_the_mean_of_the_debiased_rows_and_their_consensus_distance():
    """``average(group)`` (what ``Run.evaluate_all`` reports): the model of the mean of z_i / w_i
    with the mean local float buffers, and (1/n) sum_i ||z_i / w_i - mean||^2 over the trained
    parameters."""
    from lpdt.decentral.group import LocalGroup

    st = _trained()
    x0, w0 = st.x.clone(), st.w.clone()
    avg, consensus = st.average(LocalGroup(st.nodes))
    z = x0 / w0[:, None]
    mean = z.mean(0)
    flat = torch.cat([p.detach().reshape(-1) for p in avg.parameters()])
    assert torch.equal(flat, mean[: st.p_train])
    assert torch.equal(avg[0].running_max, mean[st.p_train :])  # the gossiped buffer
    stats = torch.stack([m[1].running_mean for m in st.models])
    assert torch.equal(avg[1].running_mean, stats.mean(0))  # a local buffer, averaged
    dist = (z[:, : st.p_train] - mean[: st.p_train]).pow(2).sum(1).mean()
    assert consensus == float(dist) and consensus > 0
    assert torch.equal(st.x, x0) and torch.equal(st.w, w0)  # the state is left as it was
    assert avg.training == st.models[0].training
    # identical de-biased models: no distance
    same = NodeState(make(), 3)
    same.x.mul_(same.w.new_tensor([2.0, 4.0, 0.5])[:, None])
    same.w.copy_(torch.tensor([2.0, 4.0, 0.5]))
    assert same.average(LocalGroup(3))[1] < 1e-12  # (rounding of the mean only)


def test_step_and_gossip_act_on_the_trained_rows_and_fold_qgm():
    """``step(opt, lr)`` steps the trained part of z with ``grad``; ``gossip(algo, opt, lr)``
    hands an optimizer that folds the correction (QGM) the trained part of ``delta / w``."""
    from lpdt.decentral.algorithms import make_algorithm
    from lpdt.decentral.compression import LayerwiseCompressor
    from lpdt.decentral.optim import LocalOptimizer
    from lpdt.decentral.topology import matrix_from_peers

    class Recorder(LocalOptimizer):
        folds_gossip = True

        def __init__(self):
            self.calls = []

        def step(self, z, g, lr):
            self.calls.append(("step", z.clone(), g.clone(), lr))
            z.sub_(g, alpha=lr)

        def after_gossip(self, debiased_delta, lr):
            self.calls.append(("fold", debiased_delta.clone(), lr))

    st = _trained()
    st.grad.copy_(torch.randn_like(st.grad))
    x0, g0 = st.x.clone(), st.grad.clone()
    opt = Recorder()
    st.step(opt, 0.5)
    assert opt.calls[0][0] == "step" and opt.calls[0][3] == 0.5
    assert torch.equal(opt.calls[0][1], x0[:, : st.p_train]) and torch.equal(opt.calls[0][2], g0)
    assert torch.equal(st.x[:, : st.p_train], x0[:, : st.p_train] - 0.5 * g0)
    assert torch.equal(st.x[:, st.p_train :], x0[:, st.p_train :])  # the buffers are not stepped
    w_mat = matrix_from_peers([[1, 2, 3], [2], [3], [0]]).float()
    comp = LayerwiseCompressor([(s.offset, s.numel) for s in st.segments], "none", 0.0)
    delta = st.gossip(make_algorithm("sgp", w_mat, comp, 1.0, st.numerators()), opt, 0.25)
    kind, folded, lr = opt.calls[1]
    assert kind == "fold" and lr == 0.25
    assert torch.equal(folded, (delta / st.w[:, None])[:, : st.p_train])
    opt.folds_gossip = False
    st.gossip(make_algorithm("sgp", w_mat, comp, 1.0, st.numerators()), opt, 0.25)
    assert len(opt.calls) == 2  # no fold for an optimizer that does not fold


def test_finite_rows_flags_each_node():
    st = _trained(3)
    assert st.finite_rows().tolist() == [1.0, 1.0, 1.0]
    st.x[1, -1] = float("nan")
    st.x[2, 0] = float("inf")
    assert st.finite_rows().tolist() == [1.0, 0.0, 0.0]
