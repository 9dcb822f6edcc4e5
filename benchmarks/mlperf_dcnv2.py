"""DLRM-DCNv2 (`workload=dlrm_dcnv2`) beside MLPerf Training v4.0's published step times.

    python benchmarks/mlperf_dcnv2.py [--backend analytical|packet|alpha_beta] [--gpus 8 128]

Simulates one training step of NVIDIA's two closed-division DGX H100 systems (1 node = 8 GPUs,
global batch 55,296; 16 nodes = 128 GPUs, global batch 135,168) and prints a Markdown table: the
published time per step, derived from the submission logs' timestamps (training time between
evaluations / steps), and the simulated steady-state step (the middle one of three: it waits for
the previous step's all-reduces and its input all-to-all was sent a step ahead). The sources and
what explains the gap are in docs/dlrm.md.
"""

from __future__ import annotations

import argparse

import engine
from sweep.cli import compose_config

TRAIN_SAMPLES = 4_195_197_692  # MLLOG train_samples: one epoch of Criteo 1TB

# mlcommons/training_results_v4.0, NVIDIA/results/<system>/dlrm_dcnv2/result_0.txt: run_start, then
# (epoch_num, eval_start, eval_stop) of each evaluation, times in ms (MLLOG time_ms). Training runs
# between run_start and the first eval_start and between each eval_stop and the next eval_start.
LOGS = {
    "eos_ngc24.04_merlin_hugectr (1x DGX H100)": {
        "gpus": 8, "global_batch": 55_296, "run_start": 1714039873401,
        "evals": [
            (0.049980888109768154, 1714039887049, 1714039888796), (0.09997495683348931, 1714039902444, 1714039904200),
            (0.14996902555721045, 1714039917587, 1714039919332), (0.19996309428093162, 1714039932714, 1714039934448),
            (0.24995716300465276, 1714039947829, 1714039949570), (0.2999512317283739, 1714039962952, 1714039964687),
            (0.34994530045209504, 1714039978077, 1714039979819), (0.3999393691758162, 1714039993199, 1714039994969),
            (0.4499334378995374, 1714040008358, 1714040010114), (0.4999275066232585, 1714040023496, 1714040025236),
            (0.5499215753469796, 1714040038625, 1714040040359), (0.5999156440707009, 1714040053738, 1714040055471),
            (0.649909712794422, 1714040068857, 1714040070589), (0.6999037815181431, 1714040083976, 1714040085709),
            (0.7498978502418643, 1714040099096, 1714040100836),
        ],
    },
    "eos_n16_ngc24.04_merlin_hugectr (16x DGX H100)": {
        "gpus": 128, "global_batch": 135_168, "run_start": 1714152341243,
        "evals": [
            (0.0499403937236202, 1714152344806, 1714152345137), (0.09991300705609434, 1714152348042, 1714152348372),
            (0.14988562038856848, 1714152351301, 1714152351633), (0.19985823372104264, 1714152354584, 1714152354916),
            (0.24983084705351677, 1714152357818, 1714152358149), (0.2998034603859909, 1714152360982, 1714152361314),
            (0.34977607371846503, 1714152364141, 1714152364474), (0.3997486870509392, 1714152367259, 1714152367591),
            (0.44972130038341335, 1714152370426, 1714152370758), (0.4996939137158875, 1714152373550, 1714152373881),
            (0.5496665270483616, 1714152376730, 1714152377062), (0.5996391403808358, 1714152379933, 1714152380265),
            (0.6496117537133099, 1714152383104, 1714152383436), (0.6995843670457841, 1714152386216, 1714152386547),
            (0.7495569803782582, 1714152389392, 1714152389722), (0.7995295937107324, 1714152392550, 1714152392882),
            (0.8495022070432064, 1714152395792, 1714152396124), (0.8994748203756806, 1714152398939, 1714152399270),
            (0.9494474337081548, 1714152402050, 1714152402382),
        ],
    },
}

# DGX H100 (datasheet): every GPU on NVLink 4 through NVSwitch, 900 GB/s both directions = 450 GB/s
# = 3,600 Gb/s each way; one ConnectX-7 InfiniBand NDR NIC of 400 Gb/s per GPU (the logs' SYSJSON:
# "8x ConnectX-7 IB NDR 400Gb/s"). Latencies: 1 us per NIC hop, 0.5 us on NVLink (assumed, not tuned).
NVLINK_GBPS = 3600.0
NETWORKS = {
    8: {"topology": "switch", "npus": 8, "link_gbps": NVLINK_GBPS, "link_latency_us": 0.5, "buffer_kb": None},
    128: {"topology": "hierarchical", "npus": 128, "npus_per_node": 8, "scaleup_gbps": NVLINK_GBPS,
          "scaleup_latency_us": 0.5, "link_gbps": 400.0, "link_latency_us": 1.0, "buffer_kb": None},
}


def published_step_s(log: dict) -> tuple[float, int]:
    """Mean time per training step between evaluations, and the steps it covers."""
    train_ms, last_stop, last_epoch = 0, log["run_start"], 0.0
    for epoch, start, stop in log["evals"]:
        train_ms += start - last_stop
        last_stop, last_epoch = stop, epoch
    steps = round(last_epoch * TRAIN_SAMPLES / log["global_batch"])
    return train_ms / 1000 / steps, steps


def simulated_step(backend: str, gpus: int, global_batch: int) -> dict:
    """The middle of three simulated steps: its time and where it goes."""
    workload = {**compose_config(["workload=dlrm_dcnv2"])["workload"], "batch_per_npu": global_batch // gpus,
                "iterations": 3}
    rows = engine.run({"engine": {"backend": backend}, "network": NETWORKS[gpus],
                       "system": {"all_reduce": "ring", "all_to_all": "direct"}, "workload": workload})
    assert rows["runs"][0]["status"] == "ok", rows["runs"][0]["error"]
    layers = [r for r in rows["layers"] if r["iteration"] == 1]
    compute = sum(r["fwd_compute_s"] + r["ig_compute_s"] + r["wg_compute_s"] for r in layers)
    embedding = next(r for r in layers if r["layer"] == "embedding")
    a2a_exposed = embedding["fwd_exposed_comm_s"] + embedding["ig_exposed_comm_s"]
    exposed = sum(r["fwd_exposed_comm_s"] + r["ig_exposed_comm_s"] + r["wg_exposed_comm_s"] for r in layers)
    return {"step_s": compute + exposed, "compute_s": compute, "embedding_s": embedding["fwd_compute_s"]
            + embedding["wg_compute_s"], "a2a_exposed_s": a2a_exposed, "other_exposed_s": exposed - a2a_exposed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="analytical", choices=("analytical", "packet", "alpha_beta"))
    parser.add_argument("--gpus", type=int, nargs="+", default=[8, 128], choices=sorted(NETWORKS))
    args = parser.parse_args()
    print(f"| system | GPUs | global batch | published ms/step (steps) | simulated ms/step ({args.backend}) | "
          "compute (embedding) | exposed all-to-all | other exposed | sim / published |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, log in LOGS.items():
        if log["gpus"] not in args.gpus:
            continue
        published, steps = published_step_s(log)
        sim = simulated_step(args.backend, log["gpus"], log["global_batch"])
        print(f"| {name} | {log['gpus']} | {log['global_batch']:,} | {published * 1e3:.3f} ({steps:,}) | "
              f"{sim['step_s'] * 1e3:.3f} | {sim['compute_s'] * 1e3:.3f} ({sim['embedding_s'] * 1e3:.3f}) | "
              f"{sim['a2a_exposed_s'] * 1e3:.3f} | {sim['other_exposed_s'] * 1e3:.3f} | "
              f"{sim['step_s'] / published:.2f} |")


if __name__ == "__main__":
    main()
