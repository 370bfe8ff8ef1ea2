#!/usr/bin/env python3
"""Replays a servelab plan through Hugging Face transformers and writes servelab records.

    hf-offline-peer.py PLAN_JSON --mode static|continuous --out records.jsonl [--max-seconds S]

PLAN_JSON is `servelab plan SCENARIO --json` (its one plan; its warm-up requests are skipped).
The model is a Llama-2-7B-shaped LlamaForCausalLM (32 layers, hidden 4096, 32 heads, MLP 11008,
vocabulary 32000) with random bf16 weights built directly on the GPU (torch.device('cuda'),
dtype bf16: no CPU fp32 copy), SDPA attention, greedy decoding with EOS disabled, so every request
generates exactly its planned output length, as servelab's engine does.

  static      `generate` on left-padded batches of --batch-size (32) in plan order, greedy,
              max_new_tokens = the batch's longest planned output; each request is credited only
              its own output length (its first N tokens), its token times read by a streamer at
              every step. Its end time is when `generate` returned the batch.
  continuous  transformers' continuous batching manager (the engine behind `generate_batch`):
              every request added at t = 0 with its own max_new_tokens (add_request), paged KV,
              per-token timestamps (record_timestamps), under no_grad as transformers' own entry
              points (not inference_mode: 5.17's background thread must update the warm-up's
              tensors). If add_request takes no max_new_tokens, falls back to add_requests with
              the plan's longest output for every request (generate_batch's behaviour) and credits
              each its own length (said in the .run.json's config.api). Failed requests are
              written as status "error" records.

Times are seconds from t0 = just before the first request is handed to transformers (after the
model is built and warmed up); every request arrives at 0 (offline). Writes OUT (one servelab
RequestRecord per finished request, flushed as they finish) and OUT less .jsonl plus .run.json
(the run's description for `servelab report DIR --add OUT`, written before the run starts and
again at its end, so a killed run still reports as cut short). With --max-seconds S, no new static
batch is started once the next one would end past S (estimated from the step times so far), and
continuous batching cancels what is unfinished at S: only completed requests are written, and a
summary line says how many. The last line printed is a JSON summary.
"""
import argparse
import inspect
import json
import os
import sys
import time

LABELS = {"static": "hf-static", "continuous": "hf-continuous"}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("plan", help="`servelab plan SCENARIO --json` output")
    p.add_argument("--mode", choices=["static", "continuous"], required=True)
    p.add_argument("--out", required=True, help="records.jsonl to write")
    p.add_argument("--max-seconds", type=float, default=0.0, help="stop after this many seconds (0: none)")
    p.add_argument("--batch-size", type=int, default=32, help="static: requests per generate call")
    p.add_argument("--limit", type=int, default=0, help="replay only the first N measured requests (0: all)")
    p.add_argument("--label", default="", help="run label (default hf-static@inf / hf-continuous@inf, as servelab labels a rate-.inf run)")
    p.add_argument("--no-warmup", action="store_true", help="continuous: skip the manager's CUDA-graph warm-up")
    p.add_argument("--profile-steps", type=int, default=0,
                   help="static: only time N decode steps of the first batch, then profile 4 of them (kernel "
                        "table on stdout); no records are written")
    a = p.parse_args(argv)
    if a.batch_size < 1:
        p.error("--batch-size must be >= 1")
    if a.max_seconds < 0:
        p.error("--max-seconds must be >= 0")
    return a


def load_plan(path, limit):
    """The plan's measured requests as (id, prompt ids, output length), in plan order."""
    with open(path) as f:
        j = json.load(f)
    plans = j.get("plans", [])
    if len(plans) != 1:
        sys.exit(f"{path}: expected one plan (export one rate: servelab plan SCENARIO --rate R --json), got {len(plans)}")
    reqs = [(int(r["id"]), [int(t) for t in r["prompt"]], int(r["output_tokens"]))
            for r in plans[0]["requests"] if not r.get("warmup", False)]
    if any(r[2] < 1 or not r[1] for r in reqs):
        sys.exit(f"{path}: every request needs a prompt and output_tokens >= 1")
    if limit > 0:
        reqs = reqs[:limit]
    return j.get("scenario", ""), reqs


def record(label, rid, prompt_len, out_len, sched, times, end):
    """One servelab RequestRecord line; times already relative to t0 and non-decreasing."""
    return json.dumps({
        "run": label, "id": rid, "arrival_s": 0.0, "sent_s": 0.0, "scheduled_s": sched,
        "first_token_s": times[0] if times else None, "token_times_s": times, "end_s": end,
        "prompt_tokens": prompt_len, "output_tokens": out_len, "status": "ok", "error": None,
        "preemptions": 0}) + "\n"


def monotone(start, ts):
    """ts clamped so that none is before start or its predecessor (timer reads on two threads)."""
    out, prev = [], start
    for t in ts:
        prev = max(prev, t)
        out.append(prev)
    return out


def build_model():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    # RoPE theta is Llama's default, 10000 (v5 keeps it under rope_parameters).
    cfg = LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096,
                      rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                      pad_token_id=0)
    torch.manual_seed(0)
    t = time.perf_counter()
    with torch.device("cuda"):
        model = LlamaForCausalLM._from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
    model.eval()
    model.generation_config.eos_token_id = None  # no default EOS for generate to fall back on
    torch.cuda.synchronize()
    n_params = sum(p.numel() for p in model.parameters())
    return model, {"build_s": round(time.perf_counter() - t, 3), "parameters": n_params,
                   "dtype": str(next(model.parameters()).dtype), "attn_implementation": "sdpa"}


def greedy_config(max_new_tokens):
    from transformers import GenerationConfig
    # eos_token_id None: no request stops early; every row runs to max_new_tokens.
    return GenerationConfig(do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=None, pad_token_id=0,
                            bos_token_id=1)


def run_static(model, reqs, args, label, out):
    import torch
    from transformers.generation.streamers import BaseStreamer

    class StepClock(BaseStreamer):
        """perf_counter at every generated token (put() gets the prompt first, then one token a step,
        after .cpu() has waited for the step)."""
        def __init__(self):
            self.times, self.seen_prompt = [], False

        def put(self, value):
            if not self.seen_prompt:
                self.seen_prompt = True
                return
            self.times.append(time.perf_counter())

        def end(self):
            pass

    def batch_tensors(batch):
        width = max(len(p) for _, p, _ in batch)
        ids = torch.zeros((len(batch), width), dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, (_, p, _) in enumerate(batch):  # left padding
            ids[i, width - len(p):] = torch.tensor(p)
            mask[i, width - len(p):] = 1
        return ids.cuda(), mask.cuda(), width

    # Warm-up (not timed): one short batch, so CUDA/cuBLAS start-up is not charged to the run.
    ids, mask, _ = batch_tensors(reqs[:2])
    with torch.inference_mode():
        model.generate(input_ids=ids, attention_mask=mask, generation_config=greedy_config(4))
    torch.cuda.synchronize()

    if args.profile_steps > 0:
        return profile_static(model, reqs[:args.batch_size], args.profile_steps, batch_tensors, StepClock)

    batches = [reqs[i:i + args.batch_size] for i in range(0, len(reqs), args.batch_size)]
    done, steps, step_s, cut, mismatched = 0, 0, 0.0, False, 0
    t0 = time.perf_counter()
    for batch in batches:
        max_new = max(o for _, _, o in batch)
        if args.max_seconds > 0 and steps > 0:
            elapsed = time.perf_counter() - t0
            if elapsed + max_new * (step_s / steps) > args.max_seconds:
                cut = True
                break
        ids, mask, width = batch_tensors(batch)
        clock = StepClock()
        start = time.perf_counter()
        with torch.inference_mode():
            seqs = model.generate(input_ids=ids, attention_mask=mask, generation_config=greedy_config(max_new),
                                  streamer=clock)
        torch.cuda.synchronize()
        end = time.perf_counter()
        if seqs.shape[1] - width != max_new or len(clock.times) != max_new:
            mismatched += len(batch)
        steps += len(clock.times)
        step_s += end - start
        for rid, p, o in batch:
            times = monotone(start - t0, [t - t0 for t in clock.times[:o]])
            out.write(record(label, rid, len(p), o, start - t0, times, max(end - t0, times[-1] if times else 0)))
            done += 1
        out.flush()
    wall = time.perf_counter() - t0
    return {"completed": done, "cut": cut, "wall_s": wall, "batches_run": (done + args.batch_size - 1) // args.batch_size,
            "decode_steps": steps, "rows_not_full_length": mismatched,
            "config": {"batch_size": args.batch_size, "padding": "left", "cache": "DynamicCache (default)",
                       "max_new_tokens": "the batch's longest planned output", "credit": "own planned output length",
                       "eos": "disabled", "decoding": "greedy", "end_s": "when generate returned the batch"}}


def profile_static(model, batch, n_steps, batch_tensors, StepClock):
    """Where a static decode step's time goes: N steps timed plainly, then 4 under torch.profiler."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    ids, mask, width = batch_tensors(batch)
    clock = StepClock()
    with torch.inference_mode():
        model.generate(input_ids=ids, attention_mask=mask, generation_config=greedy_config(n_steps), streamer=clock)
    torch.cuda.synchronize()
    gaps = [b - a for a, b in zip(clock.times, clock.times[1:])]
    per_step = sum(gaps) / max(1, len(gaps))
    print(f"profile: batch {len(batch)}, padded prompt width {width}, {len(gaps)} decode steps, "
          f"{per_step * 1e3:.1f} ms/step without the profiler")
    clock = StepClock()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof, torch.inference_mode():
        model.generate(input_ids=ids, attention_mask=mask, generation_config=greedy_config(5), streamer=clock)
        torch.cuda.synchronize()
    events = prof.key_averages()
    for key in ("self_device_time_total", "self_cuda_time_total"):
        try:
            print(events.table(sort_by=key, row_limit=18))
            break
        except Exception:
            continue
    return {"profile_ms_per_step": per_step * 1e3}


def run_continuous(model, reqs, args, label, out):
    import torch
    from transformers import GenerationConfig
    max_new = max(o for _, _, o in reqs)
    gen = GenerationConfig(do_sample=False, max_new_tokens=max_new, eos_token_id=-1, pad_token_id=0, bos_token_id=1)
    by_id = {str(rid): (rid, p, o) for rid, p, o in reqs}
    written, over, short, failed = set(), 0, 0, 0
    api = "manager.add_request (per-request max_new_tokens)"

    def write_failed(res, t0):
        nonlocal failed
        rid, p, o = by_id[res.request_id]
        failed += 1
        out.write(json.dumps({"run": label, "id": rid, "arrival_s": 0.0, "sent_s": 0.0, "scheduled_s": None,
                              "first_token_s": None, "token_times_s": [], "end_s": None, "prompt_tokens": len(p),
                              "output_tokens": 0, "status": "error", "error": str(res.error)[:300],
                              "preemptions": 0}) + "\n")
        written.add(res.request_id)

    def write(res, t0):
        nonlocal over, short
        rid, p, o = by_id[res.request_id]
        n = len(res.generated_tokens)
        over += n > o
        short += n < o
        credit = min(n, o)
        sched = max(0.0, res.lifespan[0] - t0) if res.lifespan and res.lifespan[0] > 0 else 0.0
        ts = [t - t0 for t in (res.timestamps or [])][:credit]
        times = monotone(sched, ts)
        end = res.lifespan[1] - t0 if res.lifespan and res.lifespan[1] > 0 else (times[-1] if times else sched)
        end = max(end, times[-1] if times else sched)
        out.write(record(label, rid, len(p), credit, sched, times, end))
        written.add(res.request_id)

    kw = {}
    try:
        from transformers.generation.continuous_batching.utils import WorkloadHints
        hint = dict(max_prompt_length=max(len(p) for _, p, _ in reqs), max_generated_length=max_new,
                    num_requests=len(reqs))
        if "num_requests" not in inspect.signature(WorkloadHints).parameters:
            del hint["num_requests"]
        kw["workload_hints"] = WorkloadHints(**hint)
    except Exception:  # older layouts: let the manager size itself
        pass
    cm_sig = inspect.signature(model.continuous_batching_context_manager).parameters
    kw = {k: v for k, v in kw.items() if k in cm_sig}
    if "warmup" in cm_sig:
        kw["warmup"] = not args.no_warmup

    cut = False
    t_setup = time.perf_counter()
    # no_grad, as transformers' own entry points: 5.17's background thread is not in inference mode,
    # so tensors made in inference mode during the warm-up could not be updated there.
    with torch.no_grad(), model.continuous_batching_context_manager(
            generation_config=gen, block=True, timeout=30, **kw) as manager:
        setup_s = time.perf_counter() - t_setup
        add_sig = inspect.signature(manager.add_request).parameters
        per_request = "max_new_tokens" in add_sig
        t0 = time.perf_counter()
        if per_request:
            extra = {"record_timestamps": True} if "record_timestamps" in add_sig else {}
            if "eos_token_id" in add_sig:
                extra["eos_token_id"] = -1
            for rid, p, o in reqs:
                manager.add_request(input_ids=p, request_id=str(rid), max_new_tokens=o, **extra)
        else:
            api = "manager.add_requests (one max_new_tokens: the plan's longest; each credited its own)"
            manager.add_requests(inputs=[p for _, p, _ in reqs], max_new_tokens=max_new, record_timestamps=True)
            by_id.update({f"req_{i}": r for i, r in enumerate(reqs)})
        while len(written) < len(reqs):
            if args.max_seconds > 0 and time.perf_counter() - t0 > args.max_seconds:
                cut = True
                break
            res = manager.get_result(timeout=1)
            if res is None:
                if not manager.is_running():
                    print("continuous batching thread stopped early", file=sys.stderr)
                    cut = True
                    break
                continue
            if res.request_id in written:
                continue
            status = getattr(getattr(res, "status", None), "name", "")
            if getattr(res, "error", None) or status == "FAILED":
                write_failed(res, t0)
                out.flush()
            elif res.is_finished():
                write(res, t0)
                out.flush()
        wall = time.perf_counter() - t0
        if cut and hasattr(manager, "cancel_request"):
            for key in by_id:
                if key not in written:
                    manager.cancel_request(key)
    return {"completed": len(written) - failed, "failed": failed, "cut": cut, "wall_s": wall,
            "setup_s": round(setup_s, 3),
            "more_tokens_than_planned": over, "fewer_tokens_than_planned": short,
            "config": {"api": api, "scheduler": "transformers default (FIFO)", "kv": "paged (PagedAttentionCache)",
                       "attn_implementation": getattr(model.config, "_attn_implementation", "?"),
                       "warmup": not args.no_warmup, "eos": "disabled (-1)", "decoding": "greedy",
                       "credit": "min(generated, planned) tokens"}}


def write_run_file(path, label, mode, planned, config):
    """OUT.run.json: the run as `servelab report DIR --add OUT` reads it (a runs.json run entry)."""
    with open(path + ".tmp", "w") as f:
        json.dump({"runs": [{"label": label, "strategy": LABELS[mode], "batching": mode,
                             "kv": "paged" if mode == "continuous" else "", "backend": "hf-transformers",
                             "mode": "max", "n_requests": planned, "config": config}]}, f, indent=2)
    os.replace(path + ".tmp", path)


def main(argv):
    args = parse_args(argv)
    scenario, reqs = load_plan(args.plan, args.limit)
    label = args.label or LABELS[args.mode] + "@inf"
    runs_path = (args.out[:-len(".jsonl")] if args.out.endswith(".jsonl") else args.out) + ".run.json"
    import torch
    import transformers
    if not torch.cuda.is_available():
        sys.exit("hf-offline-peer: no CUDA device")
    model, model_info = build_model()
    config = {"transformers": transformers.__version__, "torch": torch.__version__,
              "device": torch.cuda.get_device_name(0), "model": "llama2-7b shape, random weights", **model_info,
              "plan": os.path.basename(args.plan), "scenario": scenario, "planned": len(reqs),
              "max_seconds": args.max_seconds, "finished": False}
    if args.profile_steps > 0:
        if args.mode != "static":
            sys.exit("--profile-steps is for --mode static")
        print(json.dumps(run_static(model, reqs, args, label, None)), flush=True)
        os._exit(0)
    # Written first, so records left by a killed run still report as this run (cut short).
    write_run_file(runs_path, label, args.mode, len(reqs), config)
    with open(args.out, "w") as out:
        res = (run_static if args.mode == "static" else run_continuous)(model, reqs, args, label, out)
    with open(args.out) as f:
        recs = [json.loads(line) for line in f]
    ok = [r for r in recs if r["status"] == "ok"]
    out_tokens = sum(r["output_tokens"] for r in ok)
    window = max((r["end_s"] for r in ok), default=0.0)
    config.update(res.pop("config"))
    config.update({"finished": True, "completed": res["completed"], "cut_by_max_seconds": res["cut"],
                   "wall_s": round(res["wall_s"], 3)})
    for k in ("failed", "setup_s", "decode_steps", "batches_run", "rows_not_full_length", "more_tokens_than_planned",
              "fewer_tokens_than_planned"):
        if k in res:
            config[k] = res[k]
    write_run_file(runs_path, label, args.mode, len(reqs), config)
    if res["cut"]:
        print(f"{label}: cut by --max-seconds {args.max_seconds:g}: {res['completed']} of {len(reqs)} requests "
              f"completed and written", file=sys.stderr)
    summary = {"label": label, "mode": args.mode, "planned": len(reqs), "completed": res["completed"],
               "failed": res.get("failed", 0),
               "cut": res["cut"], "wall_s": round(res["wall_s"], 3), "window_s": round(window, 3),
               "output_tokens": out_tokens,
               "output_tok_s": round(out_tokens / window, 2) if window > 0 else None,
               "req_s": round(len(ok) / window, 4) if window > 0 else None,
               "transformers": transformers.__version__, "torch": torch.__version__}
    print(json.dumps(summary), flush=True)
    # The continuous batching thread may still be winding down after a cut: leave without waiting.
    sys.stderr.flush()
    os._exit(1 if res.get("failed", 0) or not ok else 0)


if __name__ == "__main__":
    main(sys.argv[1:])
