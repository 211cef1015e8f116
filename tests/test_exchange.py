"""judge/boundary/exchange.py and judge/boundary/staging.py: data as a skeleton, laid out in areas, written by the oracle's side and
read by a runner's mapping (host files here; device memory in tests/test_cuda_ipc.py)."""

import functools
import os
import re

import pytest

torch = pytest.importorskip("torch")

from judge.boundary import exchange, host_area, staging  # noqa: E402


def test_a_skeleton_keeps_nesting_values_and_tensor_order():
    a, b = torch.arange(3.0), torch.zeros(2, 2, dtype=torch.int32)
    data = (a, [b, 7, 2.5, None, "x", float("nan"), torch.float16], {"k": a})
    tree, tensors = exchange.skeleton(data)
    assert tensors[0] is a and tensors[1] is b and tensors[2] is a
    rebuilt = exchange.build(tree, [torch.ones(3), torch.ones(2, 2), torch.full((3,), 2.0)])
    assert type(rebuilt) is tuple and type(rebuilt[1]) is list and type(rebuilt[2]) is dict
    assert rebuilt[1][1:5] == [7, 2.5, None, "x"]
    assert str(rebuilt[1][5]) == "nan" and rebuilt[1][6] is torch.float16
    assert torch.equal(rebuilt[2]["k"], torch.full((3,), 2.0))


def test_data_judge_cannot_hand_over_is_named_with_its_place():
    with pytest.raises(exchange.ExchangeError, match=r"input\[1\]\['k'\] is a builtins.set"):
        exchange.skeleton((torch.zeros(1), {"k": {1}}))
    with pytest.raises(exchange.ExchangeError, match=re.escape("input['w'] is a dict with keys that are neither "
                                                               "strings nor ints")):
        exchange.skeleton({"w": {(1, 2): torch.zeros(1)}})


def test_a_dict_of_int_keys_among_the_inputs_arrives_with_them():
    """MoE-style inputs: weights by expert number."""
    tree, found = exchange.skeleton({0: torch.zeros(2), 7: torch.ones(2)})
    rebuilt = exchange.build(tree, found)
    assert list(rebuilt) == [0, 7] and rebuilt[7] is found[1]


def test_layouts_keep_strides_and_start_each_tensor_on_its_own_page():
    t = torch.zeros(4, 6).t()  # a transposed view: strides (1, 6)
    copies, ends = exchange.plan([t, torch.zeros(3, dtype=torch.float64)], 2, {"device": 0, "host": 512})
    first, second = copies
    assert first[0] == {"area": "host", "offset": 512, "dtype": "float32", "shape": [6, 4], "stride": [1, 6]}
    assert first[1]["offset"] == 512 + 4096 and second[0]["offset"] == 512 + 2 * 4096
    assert ends == {"device": 0, "host": 512 + 4 * 4096}


def test_what_the_oracle_writes_the_runner_reads_and_the_other_way(tmp_path):
    host = host_area.HostFile(tmp_path / "inbox")
    host.reserve(3 * 4096)
    value = torch.arange(24.0).reshape(4, 6).t()
    layout = exchange.plan([value], 1, {"device": 0, "host": 4096})[0][0][0]
    host.write(layout, value)
    mapped = host_area.MappedFile(str(tmp_path / "inbox"), host.nbytes)
    seen = mapped.view(layout)
    assert seen.stride() == (1, 6) and torch.equal(seen, value)
    seen.mul_(2)  # the runner writes in place: the oracle reads what it wrote
    assert torch.equal(host.read(layout), value * 2)


def test_a_runner_that_cuts_its_file_short_cannot_fault_the_oracle(tmp_path):
    host = host_area.HostFile(tmp_path / "outbox")
    host.reserve(8192)
    layout = {"area": "host", "offset": 4096, "dtype": "float32", "shape": [1024], "stride": [1]}
    os.truncate(tmp_path / "outbox", 100)
    with pytest.raises(exchange.ExchangeError, match="cut short in the kernel's process"):
        host.read(layout)


def test_the_oracle_never_follows_a_link_planted_where_its_file_goes(tmp_path):
    os.symlink(tmp_path / "elsewhere", tmp_path / "inbox")
    with pytest.raises(exchange.ExchangeError, match=r"inbox could not be made \(File exists\)"):
        host_area.HostFile(tmp_path / "inbox")
    assert not (tmp_path / "elsewhere").exists()


def test_a_runners_files_are_made_in_the_directory_judge_made_for_it(tmp_path):
    directory = tmp_path.resolve() / "exchange" / "a1"
    directory.mkdir(parents=True)
    files = staging.open_files(str(directory), os.geteuid())
    assert sorted(p.name for p in directory.iterdir()) == ["inbox", "outbox"]
    files.close()


def test_an_exchange_directory_reached_through_a_link_is_refused_and_nothing_is_written_there(tmp_path):
    """Issue 39: a kernel that replaced a directory on the way with a link had the oracle write where it chose."""
    root, elsewhere = tmp_path.resolve(), tmp_path.resolve() / "elsewhere"
    (elsewhere / "a1").mkdir(parents=True)
    (root / "exchange").symlink_to(elsewhere)
    with pytest.raises(exchange.ExchangeError, match=r"^the exchange directory .*/exchange/a1 could not be opened at "
                                                     r"'exchange' without following a link \(Not a directory\)$"):
        staging.open_files(str(root / "exchange" / "a1"))
    assert list(elsewhere.rglob("*")) == [elsewhere / "a1"]


def test_a_squatted_exchange_directory_is_refused(tmp_path):
    """Issue 39: files planted where the oracle makes a runner's made its attach fail with FileExistsError."""
    directory = tmp_path.resolve() / "a1"
    directory.mkdir()
    (directory / "inbox").write_text("planted")
    with pytest.raises(exchange.ExchangeError, match=r"^the exchange directory .*/a1 was not empty$"):
        staging.open_files(str(directory))
    assert (directory / "inbox").read_text() == "planted" and not (directory / "outbox").exists()


def test_an_exchange_directory_others_may_write_is_refused(tmp_path):
    directory = tmp_path.resolve() / "a1"
    directory.mkdir()
    directory.chmod(0o777)
    with pytest.raises(exchange.ExchangeError, match=rf"^the exchange directory .*/a1 is not judge's own \(owner "
                                                     rf"{os.geteuid()}, mode 0777\)$"):
        staging.open_files(str(directory))


def test_an_output_description_that_reaches_past_the_outbox_is_refused(tmp_path):
    files = staging.RunnerFiles(host_area.HostFile(tmp_path / "in"), host_area.HostFile(tmp_path / "out"))
    files.outbox.reserve(4096)
    past = [["host", 0, 2048, [1024], [1]]]  # float32 x 1024 from byte 2048: 2 KiB past the end
    with pytest.raises(exchange.ExchangeError, match="reaches past the outbox"):
        staging.received(past, files)
    with pytest.raises(exchange.ExchangeError, match="does not write"):
        staging.received([["host", 99, 0, [1], [1]]], files)
    with pytest.raises(exchange.ExchangeError, match="shape or strides"):
        staging.received([["host", 0, 0, [-1], [1]]], files)


def test_a_runner_s_device_outbox_follows_its_inputs_in_its_own_memory_and_is_read_only_there(tmp_path):
    """No device memory is shared between runners: each runner's outbox is the tail of the memory it allocates for
    its inputs (what a kernel leaves there reaches no rival, so the oracle zeroes only the spans it reads, not a
    whole shared outbox before every call: 2.6 ms for cholesky_py's 8 GiB on an H200, 2026-11-29). An output
    described past the outbox, into the runner's inputs, is refused before anything is read."""
    area = staging.Area(skeleton=None, copies=[], host_bytes=0, device_bytes=5000, poison=[])
    files = staging.RunnerFiles(host_area.HostFile(tmp_path / "in"), host_area.HostFile(tmp_path / "out"))
    plan = staging.plan_for(area, files, {"device": 12288, "host": 1 << 20})
    assert plan["device"] == {"bytes": 8192 + 12288} and files.device_wanted == 8192 + 12288
    assert plan["outbox"]["device"] == {"offset": 8192, "bytes": 12288}
    assert (files.outbox_at, files.outbox_bytes) == (8192, 12288)
    with pytest.raises(exchange.ExchangeError, match="^a device output without a device outbox$"):
        staging.received([["device", 0, 0, [4], [1]]], files)  # nothing mapped yet
    files.device = object()  # mapped: the layout is checked before the memory is touched
    with pytest.raises(exchange.ExchangeError, match="^an output reaches past the outbox$"):
        staging.received([["device", 0, 8192, [2048], [1]]], files)  # float32 x 2048 from 8 KiB: 4 KiB past it
    files.device = None
    plan = staging.plan_for(area, files, {"device": 0, "host": 1 << 20})  # outputs on the host only
    assert plan["device"] == {"bytes": 5000} and plan["outbox"]["device"] is None and files.outbox_bytes == 0


class _Mapped:
    """What RunnerFiles.device holds once the oracle has mapped a runner's memory: its size, as the driver says."""

    def __init__(self, nbytes: int):
        self.nbytes, self.closed = nbytes, False

    def close(self) -> None:
        self.closed = True


def test_a_runner_s_memory_is_asked_for_at_the_largest_case_s_size_once_and_kept_for_smaller_ones(tmp_path):
    """A check's cases grow (matmul_py's from 64x64 to 4096x5120): a runner whose memory had to grow at each larger
    case allocated, exported and had it mapped again at each. Where its memory must grow, it is asked for the
    largest case's size so far (Oracle.case's `at_least`) at once; where what it has fits, it is asked for no
    more, and the mapping is kept."""
    files = staging.RunnerFiles(host_area.HostFile(tmp_path / "in"), host_area.HostFile(tmp_path / "out"))
    small = staging.Area(skeleton=None, copies=[], host_bytes=0, device_bytes=4096, poison=[])
    plan = staging.plan_for(small, files, {"device": 4096, "host": 1 << 20}, at_least=1 << 20)
    assert plan["device"] == {"bytes": 1 << 20} and files.device_wanted == 1 << 20  # nothing mapped: grows
    assert plan["outbox"]["device"] == {"offset": 4096, "bytes": 4096}  # the outbox stays after the inputs
    files.device = mapped = _Mapped(1 << 20)
    plan = staging.plan_for(small, files, {"device": 4096, "host": 1 << 20}, at_least=1 << 21)
    assert plan["device"] == {"bytes": 8192} and not mapped.closed  # it fits: no more asked, the mapping kept
    large = staging.Area(skeleton=None, copies=[], host_bytes=0, device_bytes=3 << 20, poison=[])
    plan = staging.plan_for(large, files, {"device": 0, "host": 1 << 20}, at_least=1 << 21)
    assert plan["device"] == {"bytes": 3 << 20} and mapped.closed  # past both: its own size, the old one let go


def test_staging_writes_the_set_poisons_the_outputs_and_reading_zeroes_what_was_read(tmp_path):
    data = (torch.arange(4.0), torch.ones(4), torch.empty(4))
    area = staging.lay_out(data, ["[2]"], 2)
    area.sets["s"] = staging.tensors_of(data)
    files = staging.RunnerFiles(host_area.HostFile(tmp_path / "in"), host_area.HostFile(tmp_path / "out"))
    plan = staging.plan_for(area, files, {"device": 0, "host": 8192})
    staging.stage(area, "s", 1, [files], flush=False)
    mapped = host_area.MappedFile(plan["host"]["path"], plan["host"]["bytes"])
    a, b, out = (mapped.view(layout) for layout in plan["copies"][1])
    assert torch.equal(a, data[0]) and torch.equal(b, data[1]) and torch.isnan(out).all()
    box = host_area.MappedFile(plan["outbox"]["host"]["path"], plan["outbox"]["host"]["bytes"])
    box.view({"offset": 0, "dtype": "float32", "shape": [4], "stride": [1]}).copy_(a + b)
    got = staging.received([["host", 0, 0, [4], [1]]], files)
    assert torch.equal(got[0], a + b)
    assert not box.view({"offset": 0, "dtype": "float32", "shape": [4], "stride": [1]}).any()


def test_an_output_is_rebuilt_with_the_kernel_s_nesting_and_the_reference_s_or_judge_s_classes():
    """A plain tuple stays one where the reference returns a named tuple (judged on values); a named tuple whose
    fields match the reference's at its place becomes the reference's class, another becomes judge's own."""
    x = torch.arange(6.0).reshape(2, 3)
    reference = (torch.max(x, dim=1), 1.5)
    plain = {"tuple": [{"tuple": [{"tensor": 0}, {"tensor": 1}]}, {"value": 1.5}]}
    values, indices = torch.ones(2), torch.zeros(2, dtype=torch.int64)
    got = exchange.build_output(plain, [values, indices], like=reference)
    assert type(got) is tuple and type(got[0]) is tuple and got[0][0] is values and got[1] == 1.5
    named = {"tuple": [{"fields": ["values", "indices"], "tuple": [{"tensor": 0}, {"tensor": 1}]}, {"value": 1.5}]}
    got = exchange.build_output(named, [values, indices], like=reference)
    assert type(got[0]) is torch.return_types.max and got[0].indices is indices
    other = {"fields": ["values", "class", "_x", "values"], "tuple": [{"value": n} for n in range(4)]}
    got = exchange.build_output(other, [], like=reference)
    assert type(got).__name__ == "output" and type(got).__module__ == "judge.boundary.exchange"
    assert got._fields == ("values", "_1", "_2", "_3") and tuple(got) == (0, 1, 2, 3)
    assert exchange.build_output({"dict": [[3, {"float": "nan"}], ["k", {"value": None}]]}, []).keys() == {3, "k"}


@pytest.mark.parametrize("tree,count", [
    ({"tensor": 1}, 2),  # tensors out of their order
    ({"tuple": [{"tensor": 0}]}, 2),  # a tensor handed over that the description leaves out
    ({"tensor": True}, 1),
    ({"value": "text"}, 0),
    ({"value": 1 << 64}, 0),
    ({"value": 1.5, "tensor": 0}, 0),
    ({"float": "1.5"}, 0),
    ({"set": []}, 0),
    ({"dict": [[True, {"value": 1}]]}, 0),
    ({"dict": [["k", {"value": 1}], ["k", {"value": 2}]]}, 0),
    ({"fields": "ab", "tuple": [{"value": 1}, {"value": 2}]}, 0),
    ({"fields": ["a"], "tuple": [{"value": 1}, {"value": 2}]}, 0),
    (functools.reduce(lambda inner, _: {"list": [inner]}, range(17), {"value": 0}), 0),  # 18 deep
    ({"list": [{"value": 0}] * 1024}, 0),
])
def test_an_output_description_judge_s_frame_does_not_write_is_refused(tree, count):
    with pytest.raises(exchange.ExchangeError, match="^the kernel's process described its output in a way judge "
                                                     "does not write$"):
        exchange.build_output(tree, [torch.zeros(1)] * count)


def test_what_a_skeleton_or_an_output_holds_goes_with_its_last_reference():
    """skeleton's recursive walk held itself through its closure, and with it every tensor of the data it described,
    until a collection ran: a benchmark's released sets stayed alive in the oracle (on the CPU, 2026-11-29; on an H200
    trimul's oracle held 28,162 MiB of tensors as a pair began, not yet measured after this change). Collections are
    off here: only reference counts free anything."""
    import gc
    import weakref

    data = (torch.ones(4), {"w": torch.zeros(3), "n": [torch.ones(2)]}, 7)
    alive = [weakref.ref(t) for t in (data[0], data[1]["w"], data[1]["n"][0])]
    enabled = gc.isenabled()
    gc.disable()
    try:
        tree, tensors = exchange.skeleton(data)
        output = exchange.build_output(tree, tensors, like=data)
        del data, tensors, output
        assert [ref() for ref in alive] == [None, None, None]
    finally:
        if enabled:
            gc.enable()
