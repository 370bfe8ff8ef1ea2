#!/usr/bin/env python3
"""Peers and ceilings for kernel_bench, timed with PyTorch on the GPU machine (issue 8, items 2-3).

  python3 scripts/gpu-bench-peers.py --out peers.json [--quick] [--decode-only | --prefill-only]
      times torch's scaled_dot_product_attention (fastest of its flash, cuDNN and memory-efficient
      backends) on kernel_bench's shapes: decode (one query row per sequence, contiguous KV
      [batch, kv_heads, ctx, 128], GQA 1 and 4, 32 query heads) and 4k causal prefill; plus a
      2 GiB device-to-device copy and an 8192^3 bf16 matmul as ceilings. --decode-only: the copy and
      the decode shapes only (as kernel_bench --decode-only); --prefill-only: the ceilings and the
      prefill shapes only (as kernel_bench --prefill-only). --gemm-only: the copy, the bf16 GEMM and
      torch._scaled_mm FP8 at 8192^3 (per-tensor and row-wise scales) only.
  python3 scripts/gpu-bench-peers.py --combine kernel_bench.json peers.json [--peers-before P.json] --benchmarks OUT.json
      joins both (with --peers-before, a peers run before kernel_bench: prefill rows read against the
      mean of the SDPA figures before and after) into issue 8's list of {name, value, unit, peer_or_ceiling, ratio, shape, device,
      date, commit}: our figure beside its peer on the same shape.

  python3 scripts/gpu-bench-peers.py --profile-decode "b1 ctx1024 gqa4" ... [--backend cudnn]
      SDPA on those decode shapes, 3 eager calls each, nothing else on the GPU (for ncu).

DECODE_SHAPES (environment, ';'-separated "b8 ctx1024 gqa4;b1 ctx32768 gqa4"): only those decode
shapes, as kernel_bench reads it.

Decode as kernel_bench times it: one CUDA graph of 20 calls per backend, the backends timed in
interleaved rounds (warm-up, then 15 rounds of one replay each, median). Prefill: one CUDA graph of 20 calls (inputs rotated through enough copies
that repeats do not run from L2), replayed after warm-up, median of 15 replays, per call. Bytes
counted the same way for both: K and V read once, Q read, O written. Random normal inputs.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys

BATCHES = [1, 8, 32, 128, 256]
CTXS = [1024, 4096, 32768]
QUICK_BATCHES, QUICK_CTXS = [1, 32], [4096]
N_HEADS, HD = 32, 128
KV_LIMIT = 24 << 30  # kernel_bench's limit on one arena


def time_graph_ms(torch, fn, n_rot, per_graph=20, reps=15):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(3):
            fn(i % n_rot)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(per_graph):
            fn(i % n_rot)
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    g.replay()
    b.record()
    b.synchronize()
    # warm-up replays worth >= 25 ms of GPU time, as kernel_bench's time_graph_ms does
    for _ in range(min(2000, max(1, int(25.0 / max(a.elapsed_time(b), 1e-3))))):
        g.replay()
    torch.cuda.synchronize()
    ms = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        ms.append(a.elapsed_time(b) / per_graph)
    ms.sort()
    del g
    return ms[len(ms) // 2]


class GraphTimer:
    """One CUDA graph of per_graph calls of fn(i % n_rot), built once (3 eager calls first);
    replay_ms() times one replay, ms per call. kernel_bench's GraphTimer, the same method."""

    def __init__(self, torch, fn, n_rot, per_graph=20):
        self.torch, self.per_graph = torch, per_graph
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for i in range(3):
                fn(i % n_rot)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        self.g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.g):
            for i in range(per_graph):
                fn(i % n_rot)

    def replay_ms(self):
        a, b = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
        a.record()
        self.g.replay()
        b.record()
        b.synchronize()
        return a.elapsed_time(b) / self.per_graph

    def warm(self, gpu_ms=25.0):
        first = self.replay_ms() * self.per_graph
        for _ in range(min(2000, max(1, int(gpu_ms / max(first, 1e-3))))):
            self.g.replay()
        self.torch.cuda.synchronize()


def time_rounds(timers, rounds=15):
    """kernel_bench's time_rounds: warm each, then rounds of one replay each (round r starts at
    timer r mod n); each timer's median ms per call."""
    for t in timers:
        t.warm()
    ms = [[] for _ in timers]
    n = len(timers)
    for r in range(rounds):
        for k in range(n):
            j = (k + r) % n
            ms[j].append(timers[j].replay_ms())
    return [sorted(m)[len(m) // 2] for m in ms]


DECODE_BACKENDS = ("flash", "cudnn", "efficient")


def sdpa_decode_best(torch, make_call, n_rot):
    """Decode: each SDPA backend's graph built, then timed in interleaved rounds as kernel_bench
    times its variants. Returns (ms, backend name, {backend: ms or error})."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    enums = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
             "efficient": SDPBackend.EFFICIENT_ATTENTION}
    tried, timers, names = {}, [], []
    for name in DECODE_BACKENDS:
        try:
            with sdpa_kernel([enums[name]]):
                timers.append(GraphTimer(torch, make_call(), n_rot))
            names.append(name)
        except Exception as e:  # a backend that does not take this shape
            tried[name] = "error: " + str(e).splitlines()[0][:120]
        torch.cuda.synchronize()
    best = (float("inf"), None)
    for name, ms in zip(names, time_rounds(timers) if timers else []):
        tried[name] = round(ms, 5)
        if ms < best[0]:
            best = (ms, name)
    del timers
    return best[0], best[1], tried


def profile_decode(shapes, backend):
    """For ncu: SDPA (one backend) on decode shapes "bB ctxC gqaG", three eager calls each, inputs
    made on the host and copied (so the only kernels are SDPA's)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    be = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
          "efficient": SDPBackend.EFFICIENT_ATTENTION}[backend]
    for shape in shapes:
        b, c, g = (int("".join(ch for ch in x if ch.isdigit())) for x in shape.split())
        n_kv = N_HEADS // g
        k = torch.randn(b, n_kv, c, HD, dtype=torch.bfloat16).cuda()
        v = torch.randn(b, n_kv, c, HD, dtype=torch.bfloat16).cuda()
        q = torch.randn(b, N_HEADS, 1, HD, dtype=torch.bfloat16).cuda()
        torch.cuda.synchronize()
        with sdpa_kernel([be]):
            for _ in range(3):
                F.scaled_dot_product_attention(q, k, v, enable_gqa=g > 1)
        torch.cuda.synchronize()
        print(f"profiled {backend} {shape}", flush=True)


def sdpa_best(torch, make_call, n_rot):
    """Fastest backend: returns (ms, backend name, {backend: ms or error})."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    tried = {}
    best = (float("inf"), None)
    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                     ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        try:
            with sdpa_kernel([be]):
                fn = make_call()
                ms = time_graph_ms(torch, fn, n_rot)
            tried[name] = round(ms, 5)
            if ms < best[0]:
                best = (ms, name)
        except Exception as e:  # a backend that does not take this shape
            tried[name] = "error: " + str(e).splitlines()[0][:120]
        torch.cuda.synchronize()
    return best[0], best[1], tried


def measure(quick, decode_only=False, prefill_only=False, gemm_only=False):
    import torch
    import torch.nn.functional as F
    dev = torch.cuda.get_device_properties(0)
    l2 = getattr(dev, "L2_cache_size", 50 << 20)
    rows = []

    def rec(name, shape, value, unit, extra=None):
        r = {"name": name, "shape": shape, "value": value, "unit": unit}
        if extra:
            r.update(extra)
        rows.append(r)
        print(f"  {name:<24} {shape:<28} {value:10.1f} {unit}  {json.dumps(extra) if extra else ''}", flush=True)

    torch.manual_seed(0)
    # Ceilings.
    n = 1 << 30  # 2 GiB of bf16
    a = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    b = torch.empty_like(a)
    ms = time_graph_ms(torch, lambda i: b.copy_(a), 1, per_graph=5, reps=10)
    copy_gbs = 2 * a.numel() * 2 / (ms * 1e-3) / 1e9
    rec("torch_d2d_copy", "2 GiB", copy_gbs, "GB/s")
    del a, b
    if not decode_only:
        n = 8192
        x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        y = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
        ms = time_graph_ms(torch, lambda i: torch.matmul(x, w.t(), out=y), 1, per_graph=5, reps=10)
        gemm = 2 * n ** 3 / (ms * 1e-3) / 1e12
        rec("torch_gemm_bf16", "8192x8192x8192", gemm, "TFLOP/s")
        del x, w, y
        # FP8 E4M3 (issue 26): torch._scaled_mm, bf16 out, per-tensor and row-wise (per-token x
        # per-channel) fp32 scales, as kernel_bench's fp8_gemm rows.
        x8 = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
        w8 = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
        one = torch.ones((), device="cuda", dtype=torch.float32)
        sa = torch.rand(n, 1, device="cuda", dtype=torch.float32) + 0.5
        sb = torch.rand(1, n, device="cuda", dtype=torch.float32) + 0.5
        for label, s_a, s_b in (("tensor", one, one), ("rowwise", sa, sb)):
            try:
                ms = time_graph_ms(torch, lambda i: torch._scaled_mm(x8, w8.t(), scale_a=s_a, scale_b=s_b,
                                                                     out_dtype=torch.bfloat16), 1, per_graph=5, reps=10)
                rec(f"torch_scaled_mm_fp8_{label}", "8192x8192x8192", 2 * n ** 3 / (ms * 1e-3) / 1e12, "TFLOP/s")
            except RuntimeError as e:
                print(f"  torch._scaled_mm ({label}) failed: {e}", flush=True)
        del x8, w8
    if gemm_only:
        return {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "rows": rows}

    # Decode: q [B, 32, 1, 128], K/V [B, kv, ctx, 128] contiguous.
    only = {x.strip() for x in os.environ.get("DECODE_SHAPES", "").split(";") if x.strip()}
    for group in (() if prefill_only else (1, 4)):
        n_kv = N_HEADS // group
        for batch in (QUICK_BATCHES if quick else BATCHES):
            for ctx in (QUICK_CTXS if quick else CTXS):
                kv_bytes = batch * ctx * n_kv * HD * 2 * 2
                if kv_bytes > KV_LIMIT or (only and f"b{batch} ctx{ctx} gqa{group}" not in only):
                    continue
                n_rot = int(min(8, max(1, 4 * l2 // kv_bytes + 1)))
                ks = [torch.randn(batch, n_kv, ctx, HD, device="cuda", dtype=torch.bfloat16) for _ in range(n_rot)]
                vs = [torch.randn_like(ks[0]) for _ in range(n_rot)]
                q = torch.randn(batch, N_HEADS, 1, HD, device="cuda", dtype=torch.bfloat16)
                gqa = group > 1

                def make_call():
                    def call(i):
                        return F.scaled_dot_product_attention(q, ks[i], vs[i], enable_gqa=gqa)
                    return call

                ms, be, tried = sdpa_decode_best(torch, make_call, n_rot)
                del ks, vs
                torch.cuda.empty_cache()
                if be is None:
                    print(f"  no SDPA backend for decode b{batch} ctx{ctx} gqa{group}: {tried}", flush=True)
                    continue
                by = kv_bytes + 2 * batch * N_HEADS * HD * 2
                rec("sdpa_decode_attn", f"b{batch} ctx{ctx} gqa{group}", by / (ms * 1e-3) / 1e9, "GB/s",
                    {"backend": be, "ms": ms, "tried": tried})

    # Prefill: causal, one sequence, 32 query heads.
    for group in (() if decode_only else (1, 4)):
        for seq in ([4096] if quick else [1024, 4096]):
            n_kv = N_HEADS // group
            q = torch.randn(1, N_HEADS, seq, HD, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(1, n_kv, seq, HD, device="cuda", dtype=torch.bfloat16)
            v = torch.randn_like(k)

            def make_call():
                def call(i):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=group > 1)
                return call

            ms, be, tried = sdpa_best(torch, make_call, 1)
            if be is None:
                print(f"  no SDPA backend for prefill seq{seq} gqa{group}: {tried}", flush=True)
                continue
            flops = 4.0 * 0.5 * seq * seq * HD * N_HEADS
            rec("sdpa_prefill_attn", f"seq{seq} gqa{group}", flops / (ms * 1e-3) / 1e12, "TFLOP/s",
                {"backend": be, "ms": ms, "tried": tried})
    return {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "rows": rows}


def combine(kb_path, peers_path, out_path, commit, before_path=None):
    kb = json.load(open(kb_path))
    peers = json.load(open(peers_path))
    # --peers-before: the SDPA prefill peer also timed before kernel_bench (its figure moved 476-535
    # between calls); each prefill row is then read against the mean of the two adjacent runs.
    before = {}
    if before_path:
        before = {(r["name"], r["shape"]): r for r in json.load(open(before_path))["rows"]}
    device = kb[0]["device"] if kb else peers["device"]
    date = kb[0]["date"] if kb else datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ")
    commit = commit or (kb[0]["commit"] if kb else "unknown")
    prow = {(r["name"], r["shape"]): r for r in peers["rows"]}
    ceil = {r["name"]: r["value"] for r in peers["rows"] if r["name"].startswith("torch_")}
    out = []

    def add(name, value, unit, peer, ratio, shape):
        out.append({"name": name, "value": round(value, 2), "unit": unit, "peer_or_ceiling": peer,
                    "ratio": round(ratio, 3) if ratio is not None else None, "shape": shape, "device": device,
                    "date": date, "commit": commit})

    decode = {}  # base shape -> {variant: GB/s}, for the compact table printed below

    def decode_shape(shape):  # "b1 ctx1024 gqa4 (16 splits mma); engine blocks: ..." -> "... (16 splits mma) hd128 block16; engine ..."
        i = shape.find(")")
        return shape[:i + 1] + " hd128 block16" + shape[i + 1:] if i >= 0 else shape + " hd128 block16"

    for r in kb:
        shape = r["shape"]
        base = shape.split(" (")[0].replace(" split512", "")  # kernel_bench appends "(N splits)"
        if r["name"].startswith("paged_decode_attn"):
            decode.setdefault(base, {})[r["name"].replace("paged_decode_attn", "") or "default"] = r["value"]
            if r["name"] == "paged_decode_attn" and " (" in shape:  # "(16 splits mma cluster)" -> "16 mma cl"
                cut = shape.split(" (")[1].split(")")[0].replace(" splits", "").replace("cluster", "cl").replace("pipe", "p")
                decode[base]["cut"] = cut
        if r["name"] in ("paged_decode_attn", "paged_decode_attn_shuffled"):
            # the default (the engine's layout since the seventh pass) and the shuffled table beside it
            p = prow.get(("sdpa_decode_attn", base))
            if p:
                add(r["name"], r["value"], "GB/s", f"torch_sdpa_{p['backend']} {p['value']:.0f} GB/s",
                    r["value"] / p["value"], decode_shape(shape))
            if r["name"] == "paged_decode_attn":
                add("paged_decode_attn_vs_copy", r["value"], "GB/s", r["peer_or_ceiling"], r["ratio"], decode_shape(shape))
        elif r["name"] in ("prefill_attn", "prefill_attn_mma", "prefill_attn_wmma") or r["name"].startswith("prefill_attn_wgmma"):
            # the default, then the others (each wgmma version by name) against the same SDPA row;
            # the KV layout after "seqN gqaG" (" naive", " block256", " engine") is ours: SDPA reads contiguous K/V
            pbase = " ".join(base.split()[:2])
            p = prow.get(("sdpa_prefill_attn", pbase))
            pb = before.get(("sdpa_prefill_attn", pbase))
            if p and pb:
                mean = 0.5 * (p["value"] + pb["value"])
                add(r["name"], r["value"], "TFLOP/s",
                    f"torch_sdpa_{p['backend']} {mean:.0f} TFLOP/s (mean of {pb['value']:.0f} before, {p['value']:.0f} after)",
                    r["value"] / mean, shape + " causal hd128 32 heads")
            elif p:
                add(r["name"], r["value"], "TFLOP/s", f"torch_sdpa_{p['backend']} {p['value']:.0f} TFLOP/s",
                    r["value"] / p["value"], shape + " causal hd128 32 heads")
            if r["name"] == "prefill_attn":
                add("prefill_attn_vs_gemm", r["value"], "TFLOP/s", r["peer_or_ceiling"], r["ratio"], shape + " causal")
        else:
            add(r["name"], r["value"], r["unit"], r["peer_or_ceiling"], r["ratio"] if r["ratio"] else None, shape)
    for r in peers["rows"]:
        if r["name"] == "sdpa_decode_attn":
            add("sdpa_decode_attn", r["value"], "GB/s", "torch_d2d_copy", r["value"] / ceil["torch_d2d_copy"],
                r["shape"] + " " + r["backend"])
        elif r["name"] == "sdpa_prefill_attn":
            add("sdpa_prefill_attn", r["value"], "TFLOP/s", "torch_gemm_bf16", r["value"] / ceil["torch_gemm_bf16"],
                r["shape"] + " " + r["backend"])
            pb = before.get(("sdpa_prefill_attn", r["shape"]))
            if pb:
                add("sdpa_prefill_attn_before", pb["value"], "TFLOP/s", "sdpa_prefill_attn (after kernel_bench)",
                    pb["value"] / r["value"], r["shape"] + " " + pb["backend"])
        else:
            add(r["name"], r["value"], r["unit"], "-", None, r["shape"])
    json.dump(out, open(out_path, "w"), indent=2)
    copy = next((r["value"] for r in kb if r["name"] == "d2d_copy"), None)
    print(f"\n== paged decode attention: GB/s, ratio to the best SDPA backend, to copy ({copy:.0f} GB/s) ==")
    cols = ["_bps2", "_cudacore", "_nocluster", "_nopipe", "_bps2pipe", "_bps1", "_again", "_invariant"]
    for v in decode.values():  # later sweep columns (headlock, the layout columns ident, naive, onehead...)
        cols += [k for k in v if k.startswith("_") and k not in cols]
    print(f"{'shape':<19} {'cut':<12} {'ours':>5} {'sdpa':>5} {'x sdpa':>6} {'x copy':>6} | x sdpa for "
          + " ".join(c[1:] for c in cols))
    for base, v in decode.items():
        p = prow.get(("sdpa_decode_attn", base))
        if not p or "default" not in v:
            continue
        sw = " ".join(f"{v[k] / p['value']:.2f}" if k in v else "  - " for k in cols)
        print(f"{base:<19} {v.get('cut', ''):<12} {v['default']:5.0f} {p['value']:5.0f} {v['default'] / p['value']:6.2f} "
              f"{v['default'] / copy:6.2f} | {sw} ({p['backend']})")
    print(f"\n== other figures ({out_path}) ==")
    for o in out:
        if o["name"] in ("prefill_attn", "prefill_attn_vs_gemm", "prefill_attn_mma", "prefill_attn_wmma", "sdpa_prefill_attn",
                         "d2d_copy", "cublaslt_gemm_bf16", "torch_d2d_copy", "torch_gemm_bf16",
                         "sdpa_prefill_attn_before") or o["name"].startswith("prefill_attn_wgmma"):
            ratio = f"{o['ratio']:.2f} x {o['peer_or_ceiling']}" if o["ratio"] is not None else ""
            print(f"{o['name']:<26} {o['shape']:<34} {o['value']:>9.1f} {o['unit']:<8} {ratio}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--decode-only", action="store_true")
    ap.add_argument("--prefill-only", action="store_true")
    ap.add_argument("--gemm-only", action="store_true", help="the copy, the bf16 and FP8 GEMMs only")
    ap.add_argument("--combine", nargs=2, metavar=("KERNEL_BENCH_JSON", "PEERS_JSON"))
    ap.add_argument("--benchmarks")
    ap.add_argument("--profile-decode", nargs="+", metavar="SHAPE",
                    help='for ncu: SDPA on these decode shapes ("b1 ctx1024 gqa4"), 3 calls each')
    ap.add_argument("--backend", default="cudnn", choices=DECODE_BACKENDS)
    ap.add_argument("--peers-before", help="with --combine: peers.json of a run before kernel_bench (prefill rows read against the mean)")
    ap.add_argument("--commit")
    a = ap.parse_args()
    if a.profile_decode:
        profile_decode(a.profile_decode, a.backend)
        return 0
    if a.combine:
        if not a.benchmarks:
            ap.error("--combine needs --benchmarks")
        combine(a.combine[0], a.combine[1], a.benchmarks, a.commit, a.peers_before)
        return 0
    if not a.out:
        ap.error("--out or --combine")
    res = measure(a.quick, a.decode_only, a.prefill_only, a.gemm_only)
    try:
        res["nvidia_smi"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                                            "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    json.dump(res, open(a.out, "w"), indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
