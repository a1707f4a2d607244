"""The tile forms and epilogue paths of the Hopper conv2d (kernels/conv_sm90.cu) that the launcher
(launch/conv_sm90/select.rs) chooses between, each forced through tuning knobs and identified by
its launch record:

- tile forms: cooperative (two consumer warpgroups share a tile, 64/128/256 wide), ping-pong
  (they take alternate 128-row tiles, 64/128 wide), 256 rows (each warpgroup two m64 halves),
  192 rows over three consumer warpgroups (128 wide), plain 128 x 64 ping-pong tiles of fewer
  rows (conv.tm), clusters of two CTAs sharing each k-step's A tile by multicast;
- epilogue paths: the lean entry (the ResNet pattern: biases, relu or none, the residual in the
  ring or absent), the residual loaded into the ring (conv.res_ring) or into a buffer of its own
  (conv.res_buf), results written over the residual's slots (conv.tma_out) and stored as vectors
  or by TMA (conv.store_tma), the residual added on pairs of the element type (conv.packed), the
  biases loaded early (conv.early_bias).

Each is checked exact against float64 (integer data), for the results of a reference form on the
same inputs (the same bits, or but for a multiply-add contracted in one kernel only), with
persistent grids of one block or cluster (the ring wrapping across tiles) and one per SM, M and
K off the tile sizes, bf16 and f16; shapes or epilogues outside a form keep the other form; and
the launcher's defaults on ResNet-50 layers at batch 32. Skips without an sm_90a GPU."""

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest

from conv_sm90_util import (
    CLUSTER_SHAPES,
    DTYPES,
    EPS,
    FORM_SHAPES,
    ODD,
    PREFETCH,
    RING_SHAPES,
    VALUE_TYPES,
    Conv,
    assert_same_but_contraction,
    bias_act,
    check_exact,
    convs,
    fused_run,
    launched,
    plain_bits,
    resnet_b32,
    run_case,
    run_epilogue,
    run_resnet50_3x3_block,
)
from max import tuning
from max.dtype import DType

pytestmark = pytest.mark.gpu
dtypes = pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
BF16, F16 = DType.bfloat16, DType.float16

# Tile forms: the knobs that force each, and the fields its (unsplit) launches show.
FORMS = {
    "coop64": ("conv.bn=64,conv.bm=128,conv.pingpong=0", {"bn": 64, "bm": 128, "pingpong": 0}),
    "coop128": ("conv.bn=128,conv.bm=128,conv.pingpong=0", {"bn": 128, "bm": 128, "pingpong": 0}),
    "coop256": ("conv.bn=256,conv.bm=128", {"bn": 256, "bm": 128, "pingpong": 0}),
    "pp64": ("conv.bn=64,conv.bm=128,conv.pingpong=1", {"bn": 64, "bm": 128, "pingpong": 1}),
    "pp128": ("conv.bn=128,conv.bm=128,conv.pingpong=1", {"bn": 128, "bm": 128, "pingpong": 1}),
    "wide64": ("conv.bn=64,conv.bm=256", {"bn": 64, "bm": 256}),
    "wide128": ("conv.bn=128,conv.bm=256", {"bn": 128, "bm": 256}),
    "trio": ("conv.bm=192", {"bn": 128, "bm": 192, "consumers": 3}),
    "trio_c2": ("conv.bm=192,conv.cluster=2", {"bm": 192, "cluster": 1}),
}
# The forms with a lean entry, and those whose lean entry stores from the residual's slots.
LEAN = ["coop64", "coop128", "coop256", "trio"]
TMA_OUT = LEAN + ["trio_c2"]
# Plain 128 x 64 ping-pong tiles (those that clusters and short tiles apply to).
PP64 = "conv.bm=128,conv.bn=64,conv.pingpong=1,conv.splitk=1"


def spec(*parts):
    return ",".join(p for p in parts if p)


def form(name):
    return FORMS[name][0]


def grid_of(name, small):
    """A grid of one block (one cluster for trio_c2) where `small`, else the default."""
    return f"conv.grid={2 if name == 'trio_c2' else 1}" if small else ""


def shapes_of(name):
    return CLUSTER_SHAPES if name == "trio_c2" else RING_SHAPES


def check_fields(records, want, what):
    """Every conv launch in `records` shows the fields of `want`."""
    assert records, f"{what}: no launch of the Hopper conv2d"
    for r in records:
        bad = {k: r[k] for k, v in want.items() if r[k] != v}
        assert not bad, f"{what}: want {want}, launched {r['kernel']} with {bad}"


# -- a form forced on plain convs: exact and random, its record's fields


@dataclass
class Forced:
    spec: str
    want: dict
    shapes: list
    random: bool = True  # a random run too (not on the batch-32 layers)


FORCED = {}
for bn, grid, split in [(64, 1, 1), (64, 3, 1), (128, 2, 1), (128, 5, 1), (64, 2, 3), (128, 1, 2)]:
    FORCED[f"pp_n{bn}_grid{grid}_split{split}"] = Forced(
        f"conv.pingpong=1,conv.bm=128,conv.bn={bn},conv.grid={grid},conv.splitk={split}",
        {"pingpong": 1, "bn": bn}, FORM_SHAPES)
for bn, grid, split in [(64, 1, 1), (64, 3, 1), (128, None, 1), (128, 2, 2), (64, 2, 3)]:
    # (split launches keep 128 rows)
    FORCED[f"wide_n{bn}_grid{grid}_split{split}"] = Forced(
        spec(f"conv.bm=256,conv.bn={bn},conv.splitk={split}", grid and f"conv.grid={grid}"),
        {"bm": 256, "bn": bn} if split == 1 else {"bn": bn}, FORM_SHAPES)
for grid in [None, 1, 2, 5]:
    FORCED[f"trio_grid{grid}"] = Forced(spec("conv.bm=192,conv.splitk=1", grid and f"conv.grid={grid}"),
                                        FORMS["trio"][1], FORM_SHAPES + [ODD[6], ODD[19]])
FORCED["wide_resnet50_b32"] = Forced("conv.bm=256", {"bm": 256},
                                     [resnet_b32("s2_1x1_64_64"), resnet_b32("s4_1x1_256_1024")], random=False)
FORCED["trio_resnet50_b32"] = Forced("conv.bm=192", {"bm": 192}, [resnet_b32(n) for n in (
    "s4_1x1_512_256", "s5_1x1_1024_512", "s4_1x1_256_1024", "s4_3x3_256")], random=False)


@dtypes
@pytest.mark.parametrize("name", list(FORCED))
def test_forced_form(hopper, rng, name, dtype):
    case = FORCED[name]
    for cv in case.shapes:
        with tuning.override(case.spec), launched() as runs:
            run_case(hopper, rng, cv, dtype, exact=True, with_cpu=False)
            if case.random:
                run_case(hopper, rng, cv, dtype, exact=False, with_cpu=False)
        check_fields(convs(runs), case.want, f"{cv} {name}")


# -- a form against a reference form on the same inputs


@dataclass
class Pair:
    """The configuration under test (`a`) and its reference (`b`), each a spec and the fields its
    launches show; both under `common`. Plain convs (exact against float64) or the fused block
    (relu or `acts` in turn over the shapes); the same bits, or (`contracted`) but for a
    multiply-add contracted in one of the two kernels."""

    common: str
    a: tuple
    b: tuple
    shapes: list
    acts: tuple = ("relu",)
    plain: bool = False
    contracted: bool = True


PAIRS = {}
STORES = {"vec_res": "", "frag": "conv.vec=0", "vec": "conv.res_vec=0"}
for act in ["none", "relu", "gelu", "silu", "clamp"]:
    for store, store_spec in STORES.items():
        for bn, grid in ((64, 2), (128, 3)):
            # the same MMAs in the same order and the same epilogue as the cooperative form
            PAIRS[f"pp_vs_coop_{act}_{store}_n{bn}_grid{grid}"] = Pair(
                spec(store_spec, f"conv.splitk=1,conv.bn={bn},conv.grid={grid},conv.bm=128"),
                ("conv.pingpong=1", {"pingpong": 1}), ("conv.pingpong=0", {"pingpong": 0}), PREFETCH[:4], (act,))
for act in ["none", "relu", "gelu", "clamp"]:
    for store in ["vec_res", "frag"]:
        for rows, widths_grids in ((256, ((64, 2), (128, None))), (192, ((128, None), (128, 3)))):
            for bn, grid in widths_grids:
                PAIRS[f"rows{rows}_vs_128_{act}_{store}_n{bn}_grid{grid}"] = Pair(
                    spec(STORES[store], f"conv.splitk=1,conv.bn={bn},conv.pingpong=0", grid and f"conv.grid={grid}"),
                    (f"conv.bm={rows}", {"bm": rows}), ("conv.bm=128", {"bm": 128}), PREFETCH[:4], (act,))
for name, common in (("trio", "conv.bm=192,conv.splitk=1"), ("pp64", PP64)):
    for small in (False, True):
        PAIRS[f"cluster_plain_{name}_grid{'2' if small else ''}"] = Pair(
            spec(common, small and "conv.grid=2"), ("conv.cluster=2", {"cluster": 1}),
            ("conv.cluster=1", {"cluster": 0}), CLUSTER_SHAPES, plain=True, contracted=False)
for small in (False, True):
    PAIRS[f"cluster_fused_grid{'2' if small else ''}"] = Pair(
        spec("conv.bm=192,conv.splitk=1", small and "conv.grid=2"), ("conv.cluster=2", {"cluster": 1}),
        ("conv.cluster=1", {"cluster": 0}), CLUSTER_SHAPES)
for name in LEAN:
    for act in ("relu", "none"):
        for small in (False, True):
            PAIRS[f"lean_vs_full_{name}_{act}_grid{'1' if small else ''}"] = Pair(
                spec(form(name), "conv.splitk=1", grid_of(name, small)), ("conv.lean=1", {"lean": 1}),
                ("conv.lean=0", {"lean": 0}), RING_SHAPES, (act,))
for name in ["coop64", "coop128", "trio"]:
    # the biases loaded when a warp starts a tile or after the mainloop: the same arithmetic
    PAIRS[f"early_bias_{name}"] = Pair(spec(form(name), "conv.splitk=1,conv.grid=1"),
                                       ("conv.early_bias=1", {"early_bias": 1}),
                                       ("conv.early_bias=0", {"early_bias": 0}), RING_SHAPES, contracted=False)
for name in ["coop64", "coop128", "coop256", "pp64", "wide64", "trio"]:
    for small in (False, True):
        PAIRS[f"ring_vs_global_{name}_grid{'1' if small else ''}"] = Pair(
            spec(form(name), "conv.splitk=1", grid_of(name, small)), ("conv.res_ring=1", {"res_ring": 1}),
            ("conv.res_ring=0", {"res_ring": 0}), RING_SHAPES)
for act in ["none", "gelu", "clamp"]:
    for grid in (3, None):
        PAIRS[f"ring_vs_global_trio_{act}_grid{grid}"] = Pair(
            spec(form("trio"), "conv.splitk=1", grid and f"conv.grid={grid}"), ("conv.res_ring=1", {"res_ring": 1}),
            ("conv.res_ring=0", {"res_ring": 0}), RING_SHAPES[:5], (act,))
for name in TMA_OUT:
    for small in (False, True):
        common = spec(form(name), "conv.splitk=1", grid_of(name, small))
        g = "grid_small" if small else "grid"
        PAIRS[f"tma_out_vs_staged_{name}_{g}"] = Pair(
            common, ("conv.tma_out=1", {"tma_out": 1}), ("conv.tma_out=0", {"tma_out": 0}), shapes_of(name),
            ("relu", "none"))
        if name != "coop256":  # (the 256-wide form's buffer does not fit)
            # only where the residual waits changes: the same bits
            PAIRS[f"res_buf_vs_ring_slots_{name}_{g}"] = Pair(
                common, ("conv.res_buf=1", {"res_buf": 1, "cluster": int(name == "trio_c2")}),
                ("conv.res_buf=0", {"res_buf": 0}), shapes_of(name), ("relu", "none"), contracted=False)
for name in LEAN:
    for packed in (1, 0):
        PAIRS[f"vector_vs_tma_stores_{name}_packed{packed}"] = Pair(
            spec(form(name), f"conv.splitk=1,conv.packed={packed}"), ("conv.store_tma=0", {"vector": 1}),
            ("conv.store_tma=1", {"vector": 0}), shapes_of(name), contracted=False)
# plain 128 x 64 ping-pong tiles of fewer rows than 128: heights of 16 to 112, M off the tile size,
# grids of one and three blocks (units alternating between the warpgroups, the ring wrapping)
SHORT = [FORM_SHAPES[1], FORM_SHAPES[2], FORM_SHAPES[4], Conv("3x3_512_7x7", 3, 7, 7, 512, 128, 3, 3, 1, 1)]
for tm in (112, 96, 64, 16):
    for grid in (None, 1, 3):
        PAIRS[f"short_tm{tm}_grid{grid}"] = Pair(spec(PP64, grid and f"conv.grid={grid}"),
                                                 (f"conv.tm={tm}", {"tm": tm}), ("conv.tm=128", {"tm": 0}), SHORT,
                                                 plain=True, contracted=False)


def one_run(gpu, seed, cv, dtype, act, config, plain):
    """The output bits under `config`, and its conv launch records."""
    with launched() as runs:
        if plain:
            out = plain_bits(gpu, np.random.default_rng(seed), cv, dtype, config)
        else:
            out = fused_run(gpu, seed, cv, dtype, act, config)[0]
    return out, convs(runs)


@dtypes
@pytest.mark.parametrize("name", list(PAIRS))
def test_same_results_as_the_reference_form(hopper, rng, name, dtype):
    pair = PAIRS[name]
    for i, cv in enumerate(pair.shapes):
        act = pair.acts[i % len(pair.acts)]
        seed = int(rng.integers(1 << 31))
        got, runs = one_run(hopper, seed, cv, dtype, act, spec(pair.common, pair.a[0]), pair.plain)
        check_fields(runs, pair.a[1], f"{cv} {name}")
        assert len(runs) == 1, runs
        want, runs = one_run(hopper, seed, cv, dtype, act, spec(pair.common, pair.b[0]), pair.plain)
        check_fields(runs, pair.b[1], f"{cv} {name} (reference)")
        what = f"{cv} {name} {act}"
        if pair.contracted:
            assert_same_but_contraction(got, want, dtype, what)
        else:
            assert got.tobytes() == want.tobytes(), f"{what}: {(got != want).sum()} elements differ"


@dtypes
@pytest.mark.parametrize("small", [False, True], ids=["grid", "grid_small"])
@pytest.mark.parametrize("name", TMA_OUT)
def test_packed_within_one_more_rounding_of_f32(hopper, rng, name, small, dtype):
    """The residual added on pairs of the element type (relu's output rounded to it, then
    beta * r + y with one rounding; the default) against f32 arithmetic: within half an ulp of
    relu's output and one of the result, u * (3 |f32| + beta |r|), u the unit roundoff; a wrong
    residual, bias or relu is far outside it."""
    common = spec(form(name), "conv.splitk=1", grid_of(name, small))
    vt = VALUE_TYPES[dtype]
    for cv in shapes_of(name):
        seed = int(rng.integers(1 << 31))
        with launched() as runs:
            got, inputs = fused_run(hopper, seed, cv, dtype, "relu", spec(common, "conv.packed=1"))
        check_fields(convs(runs), {"packed": 1}, f"{cv} {name}")
        want, runs = one_run(hopper, seed, cv, dtype, "relu", common, plain=False)  # (fused_run: packed=0)
        check_fields(runs, {"packed": 0}, f"{cv} {name} f32")
        a, b = got.view(vt).astype(np.float64), want.view(vt).astype(np.float64)
        r = np.asarray(inputs[3]).astype(np.float64).reshape(b.shape)
        bound = EPS[dtype] * (3 * np.abs(b) + 0.5 * np.abs(r))
        bad = ~(np.abs(a - b) <= bound)
        assert not bad.any(), f"{cv} {name}: {bad.sum()} elements off, e.g. {a[bad][:4]} vs {b[bad][:4]}"


# -- fused blocks exact against float64 on a form, every launch in it


def alternating(shapes, acts=("relu", "none"), betas=(0.5, 1)):
    """(shape, act, conv_bias, beta) for each shape: acts, the conv's bias and betas in turn."""
    return [(cv, acts[i % len(acts)], i % 2 == 0, betas[i % len(betas)]) for i, cv in enumerate(shapes)]


@dataclass
class Exact:
    spec: str
    want: dict
    blocks: list  # (shape, act, conv_bias, beta)
    # conv2d (+ its bias) (+ a fused bias) (relu) without a residual: (shape, conv_bias, fused_bias, relu)
    no_residual: list = field(default_factory=list)


EXACT = {}
for act in ["none", "relu", "clamp"]:
    EXACT[f"trio_{act}"] = Exact("conv.bm=192,conv.splitk=1", {"bm": 192}, [(cv, act, True, 0.5) for cv in PREFETCH])
EXACT["cluster"] = Exact("conv.bm=192,conv.splitk=1,conv.cluster=2", {"cluster": 1}, alternating(CLUSTER_SHAPES),
                         [(cv, True, True, True) for cv in CLUSTER_SHAPES])
for name in LEAN:
    EXACT[f"lean_{name}"] = Exact(spec(form(name), "conv.splitk=1"), {"lean": 1},
                                  [(cv, act, i % 2 == 0, (0.5, 1)[i % 2]) for i, cv in enumerate(RING_SHAPES)
                                   for act in ("relu", "none")],
                                  [(cv, *biases) for cv in RING_SHAPES
                                   for biases in [(True, False, False), (False, True, True), (True, True, True)]])
for name in ["coop128", "pp64", "trio", "coop256"]:
    EXACT[f"res_ring_{name}"] = Exact(spec(form(name), "conv.res_ring=1,conv.splitk=1"), {"res_ring": 1},
                                      [(cv, "relu", True, 0.5) for cv in RING_SHAPES])
for name in TMA_OUT:
    common = spec(form(name), "conv.splitk=1")
    EXACT[f"tma_out_{name}"] = Exact(common, {"tma_out": 1}, alternating(shapes_of(name)))
    EXACT[f"packed_{name}"] = Exact(common, {"packed": 1}, alternating(shapes_of(name), acts=("relu",)))
    if name != "coop256":
        EXACT[f"res_buf_{name}"] = Exact(common, {"res_buf": 1, "cluster": int(name == "trio_c2")},
                                         alternating(shapes_of(name)))


@dtypes
@pytest.mark.parametrize("name", list(EXACT))
def test_fused_exact_on_the_form(hopper, rng, name, dtype):
    case = EXACT[name]
    with tuning.override(case.spec), launched() as runs:
        for cv, act, conv_bias, beta in case.blocks:
            run_epilogue(hopper, rng, cv, dtype, act, conv_bias=conv_bias, beta=beta, exact=True)
        for cv, conv_bias, fused_bias, relu in case.no_residual:
            g, want = bias_act(hopper, rng, cv, dtype, conv_bias, fused_bias, relu)
            check_exact(g, want, f"{cv} {name} conv_bias={conv_bias} bias={fused_bias} relu={relu}")
    check_fields(convs(runs), case.want, name)


@pytest.mark.parametrize("act", ["relu", "clamp"])
def test_pingpong_fused_exact(hopper, rng, act):
    for i, cv in enumerate(PREFETCH):
        bn = (64, 128)[i % 2]
        with tuning.override(f"conv.pingpong=1,conv.bm=128,conv.grid=3,conv.bn={bn}"), launched() as runs:
            run_epilogue(hopper, rng, cv, BF16, act, conv_bias=True, beta=0.5, exact=True)
            run_epilogue(hopper, rng, cv, F16, act, conv_bias=False, beta=1, exact=True)
        check_fields(convs(runs), {"pingpong": 1, "bn": bn}, f"{cv} ping-pong")


# -- outside a form: forcing it changes nothing, and the result stays right


def plain(cv=ODD[5]):
    return lambda gpu, rng: run_case(gpu, rng, cv, BF16, exact=True, with_cpu=False)


def plain_exact(cv):
    return lambda gpu, rng: plain_bits(gpu, rng, cv, BF16)


def blocks(shapes, dtype=F16, act="relu", exact=True):
    def run(gpu, rng):
        for cv in shapes:
            run_epilogue(gpu, rng, cv, dtype, act, conv_bias=True, beta=0.5, exact=exact)
    return run


def no_residual(shapes):
    def run(gpu, rng):
        for cv in shapes:
            g, want = bias_act(gpu, rng, cv, BF16, conv_bias=True, fused_bias=True, relu=True)
            check_exact(g, want, f"{cv} bias relu")
    return run


K192 = Conv("k192", 2, 14, 14, 128, 192, 3, 3, 1, 1)
K384 = Conv("k384", 2, 14, 14, 128, 384, 3, 3, 1, 1)  # an odd number of column tiles
TRIO_C2 = "conv.bm=192,conv.splitk=1,conv.cluster=2"
NOT_TAKEN: dict[str, tuple[str, dict, Callable]] = {
    # 256-wide tiles have no ping-pong form (2 x 128 accumulators per thread)
    "pingpong_n256": ("conv.pingpong=1,conv.bn=256,conv.grid=2", {"pingpong": 0}, plain()),
    # 192 rows are 128 wide and unsplit
    "trio_n64": ("conv.bm=192,conv.bn=64", {"bm": 128}, plain()),
    "trio_n256": ("conv.bm=192,conv.bn=256", {"bm": 128}, plain()),
    "trio_split2": ("conv.bm=192,conv.splitk=2", {"bm": 128}, plain()),
    # short tiles: plain, 64-wide, ping-pong, unclustered only
    "short_epilogue": (spec(PP64, "conv.tm=96"), {"tm": 0}, blocks([SHORT[3]], BF16)),
    "short_n128": (spec(PP64, "conv.tm=96,conv.bn=128"), {"tm": 0}, plain_exact(SHORT[3])),
    "short_cooperative": (spec(PP64, "conv.tm=96,conv.pingpong=0"), {"tm": 0}, plain_exact(SHORT[3])),
    "short_cluster": (spec(PP64, "conv.tm=96,conv.cluster=2"), {"tm": 0}, plain_exact(SHORT[3])),
    # clusters: an even number of column tiles, unsplit, 192 rows (plain or lean) or plain pp64
    "cluster_odd_column_tiles": (TRIO_C2, {"cluster": 0}, plain_exact(K384)),
    "cluster_rows128": (spec(TRIO_C2, "conv.bm=128"), {"cluster": 0}, plain_exact(CLUSTER_SHAPES[2])),
    "cluster_split": (spec(TRIO_C2, "conv.splitk=3"), {"cluster": 0}, plain_exact(CLUSTER_SHAPES[2])),
    "cluster_full_epilogue": (TRIO_C2, {"cluster": 0}, blocks([CLUSTER_SHAPES[2]], BF16, "gelu", exact=False)),
    "cluster_pp128": (spec(TRIO_C2, PP64, "conv.bn=128"), {"cluster": 0}, plain_exact(CLUSTER_SHAPES[2])),
    "cluster_pp64_odd": (spec(TRIO_C2, PP64), {"cluster": 0}, plain_exact(K192)),
    "cluster_pp64_epilogue": (spec(TRIO_C2, PP64), {"cluster": 0},
                              blocks([CLUSTER_SHAPES[2]], BF16, "gelu", exact=False)),
    # the lean entry: the biases, relu or none, the residual in the ring, unsplit, no ping-pong
    # and no 256-row tiles
    **{f"lean_{act}": (spec(form("trio"), "conv.splitk=1"), {"lean": 0}, blocks(RING_SHAPES[:3], BF16, act, False))
       for act in ("gelu", "clamp", "relu6")},
    "lean_global_residual": (spec(form("coop128"), "conv.splitk=1,conv.res_ring=0"), {"lean": 0},
                             blocks(RING_SHAPES[:3])),
    "lean_split": ("conv.splitk=3", {"lean": 0}, blocks(RING_SHAPES[:1])),
    **{f"lean_{name}": (spec(form(name), "conv.splitk=1"), {"lean": 0}, blocks(RING_SHAPES[:3]))
       for name in ("pp64", "wide64", "pp128")},
    # the residual in the ring: not for forms holding 128 accumulators in two halves, nor split
    **{f"res_ring_{name}": (spec(form(name), "conv.res_ring=1,conv.splitk=1"), {"res_ring": 0},
                            blocks(RING_SHAPES[:1], BF16)) for name in ("pp128", "wide128")},
    "res_ring_split": ("conv.res_ring=1,conv.splitk=3", {"res_ring": 0}, blocks(RING_SHAPES[:1])),
    # results over the residual's slots: the lean entry with the residual in the ring
    "tma_out_no_residual": (spec(form("coop128"), "conv.splitk=1"), {"tma_out": 0}, no_residual(RING_SHAPES[:3])),
    "tma_out_global_residual": (spec(form("coop128"), "conv.splitk=1,conv.res_ring=0"), {"tma_out": 0},
                                blocks(RING_SHAPES[:3])),
    "tma_out_full_entry": (spec(form("coop128"), "conv.splitk=1,conv.lean=0"), {"tma_out": 0},
                           blocks(RING_SHAPES[:3])),
    "tma_out_pingpong": (spec(form("coop128"), "conv.splitk=1,conv.bn=64,conv.pingpong=1"), {"tma_out": 0},
                         blocks(RING_SHAPES[:3])),
    "tma_out_split": (spec(form("coop128"), "conv.splitk=3"), {"tma_out": 0}, blocks(RING_SHAPES[:1])),
    # the residual's own buffer: TMA stores whose buffer fits
    "res_buf_coop256": (spec(form("coop256"), "conv.splitk=1"), {"res_buf": 0}, blocks(RING_SHAPES[:3])),
    "res_buf_staged_stores": (spec(form("coop128"), "conv.splitk=1,conv.tma_out=0"), {"res_buf": 0},
                              blocks(RING_SHAPES[:3])),
    "res_buf_no_residual": (spec(form("coop128"), "conv.splitk=1"), {"res_buf": 0}, no_residual(RING_SHAPES[:3])),
    "res_buf_full_entry": (spec(form("coop128"), "conv.splitk=1,conv.lean=0"), {"res_buf": 0},
                           blocks(RING_SHAPES[:3])),
    # the packed arithmetic: relu, over the residual's slots
    "packed_no_activation": (spec(form("trio"), "conv.splitk=1"), {"packed": 0},
                             blocks(RING_SHAPES[:3], BF16, "none", exact=False)),
    "packed_staged_stores": (spec(form("trio"), "conv.splitk=1,conv.tma_out=0"), {"packed": 0},
                             blocks(RING_SHAPES[:3], BF16, exact=False)),
    "packed_full_entry": (spec(form("trio"), "conv.splitk=1,conv.lean=0"), {"packed": 0},
                          blocks(RING_SHAPES[:3], BF16, exact=False)),
}


@pytest.mark.parametrize("name", list(NOT_TAKEN))
def test_outside_the_form(hopper, rng, name):
    config, want, run = NOT_TAKEN[name]
    with tuning.override(config), launched() as runs:
        run(hopper, rng)
    check_fields(convs(runs), want, name)


# -- the launcher's defaults on ResNet-50 layers at batch 32 (exact either way)

PLAIN = {"pingpong": 0, "bm": 128}
DEFAULTS = {
    # tiles of 192 rows over three consumer warpgroups where they fill the last wave and the
    # reduction is long enough (28x28 3x3 128 -> 128, 512 -> 128, 14x14 1024 -> 512, 56x56
    # 256 -> 128 in 4 waves instead of 6), else tiles of 256 rows where they measured faster
    # (64-wide tiles, or 128-wide with long reductions, when the waves of bigger tiles cost
    # less), else ping-pong where every block of the grid (one per SM) has four tiles or more,
    # or one 64-wide tile of 64 k-steps or more (7x7 3x3 512 -> 512); none of them for half a
    # wave of 192-row tiles (14x14 3x3 256 -> 256, 1024 -> 256) or 4 k-steps in more waves
    # (56x56 256 -> 512 s2)
    "s2_1x1_64_64": {"pingpong": 0, "bm": 256},
    "s2_3x3_64": {"pingpong": 0, "bm": 256},
    "s3_3x3_128": {"pingpong": 0, "bm": 192},
    "s2_1x1_256_64": {"pingpong": 0, "bm": 256},
    "s3_1x1_256_128": {"pingpong": 0, "bm": 192},
    "s3_1x1_512_128": {"pingpong": 0, "bm": 192},
    "s4_3x3_256": PLAIN,
    "s5_1x1_1024_512": {"pingpong": 0, "bm": 192},
    "s4_1x1_1024_256": PLAIN,
    "s3_ds_256_512_s2": PLAIN,
    # the 7x7 3x3 512 layers (104 tiles of 128 x 64, one a block) run 112 tiles of 112 rows
    "s5_3x3_512": {"pingpong": 1, "bm": 128, "tm": 112},
    "s5_3x3_512_s2": {"tm": 112},
    "s5_1x1_2048_512": {"tm": 0},
    # clusters where the blocks hold 1.5 tiles or more (28x28 512 -> 256: 262 tiles of 192 x 128),
    # not where they hold one (14x14 1024 -> 512: 132)
    "s4_1x1_512_256": {"cluster": 1},
}
DEFAULTS["s5_1x1_1024_512"] = dict(DEFAULTS["s5_1x1_1024_512"], cluster=0)
DEFAULTS["s4_3x3_256"] = dict(DEFAULTS["s4_3x3_256"], tm=0)


@pytest.mark.parametrize("name", list(DEFAULTS))
def test_default_choice_on_resnet50_layers(hopper, rng, name):
    cv = resnet_b32(name)
    with launched() as runs:
        plain_bits(hopper, rng, cv, BF16)
    check_fields(convs(runs), DEFAULTS[name], str(cv))


@dtypes
@pytest.mark.parametrize("name, want", [("s3_3x3_128", {"pingpong": 0, "bm": 192}), ("s4_1x1_256_1024", PLAIN)])
def test_default_choice_with_a_residual(hopper, rng, name, want, dtype):
    """The 28x28 3x3 block relu(conv + b) + r at batch 32 takes 192 x 128 tiles (one per block), as
    the conv alone does; 14x14 256 -> 1024 (4 k-steps) keeps 128 x 128 tiles with a residual."""
    with launched() as runs:
        run_epilogue(hopper, rng, resnet_b32(name), dtype, "relu", conv_bias=False, beta=1, exact=True)
    check_fields(convs(runs), want, name)


def test_default_epilogue_of_the_resnet50_3x3_block(hopper, rng):
    """The ResNet-50 3x3 block (relu, + r) takes the lean entry, the residual in its own buffer
    (loaded by TMA), results written over its slots with the packed arithmetic."""
    with launched() as runs:
        run_resnet50_3x3_block(hopper, rng)
    check_fields(convs(runs), {"lean": 1, "res_ring": 1, "tma_out": 1, "res_buf": 1, "packed": 1}, "3x3 block")
