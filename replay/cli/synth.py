"""``replay synth``: write a synthetic workload trace."""

from __future__ import annotations

import argparse
import math
import sys

from replay.cli.arguments import output_path
from replay.errors import ReplayError
from replay.times import time_argument
from replay.trace import ideal
from replay.trace.synth import Shape, SynthSpec, synthesize

DEFAULTS = SynthSpec()


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "synth", help="write a synthetic workload trace",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Write a deterministic workload trace: node creates, Poisson pod arrivals "
                    "with heavy-tailed (lognormal) lifetimes, pod deletes, optional kubelet "
                    "heartbeats and, with --bind, the bindings of one ideal scheduler. The same "
                    "arguments give a byte-identical file. traces/README.md documents the "
                    "workload and the default shape mixes.")
    parser.add_argument("--nodes", type=int, default=DEFAULTS.nodes, help="number of nodes")
    parser.add_argument("--pods", type=int, default=DEFAULTS.pods, help="number of pods")
    parser.add_argument("--arrival-rate", type=float, default=DEFAULTS.arrival_rate,
                        metavar="R", help="pod arrivals per second (Poisson)")
    parser.add_argument("--mean-lifetime", type=float, default=DEFAULTS.mean_lifetime,
                        metavar="S", help="mean pod lifetime in seconds (lognormal)")
    parser.add_argument("--lifetime-sigma", type=float, default=DEFAULTS.lifetime_sigma,
                        help="sigma of the lognormal lifetime: larger is heavier-tailed")
    parser.add_argument("--max-lifetime-factor", type=float,
                        default=DEFAULTS.max_lifetime_factor,
                        help="lifetimes are capped at this many times the mean")
    parser.add_argument("--node-shape", action="append", type=_shape, metavar="CPU/MEM[/GPU]=W",
                        help="a node shape and its weight in the mix, e.g. 16/64Gi=5 or "
                             "96/768Gi/8=1; repeat for a mix (default: "
                             + " ".join(map(str, DEFAULTS.node_shapes)) + ")")
    parser.add_argument("--pod-shape", action="append", type=_shape, metavar="CPU/MEM[/GPU]=W",
                        help="a pod shape and its weight in the mix, e.g. 500m/512Mi=3; repeat "
                             "for a mix (default: " + " ".join(map(str, DEFAULTS.pod_shapes)) + ")")
    parser.add_argument("--heartbeat-interval", type=float, default=0.0, metavar="S",
                        help="seconds between kubelet `patch nodes/status` heartbeats; 0 = off")
    parser.add_argument("--max-pods", type=int, metavar="N",
                        help="every node's allocatable pods, the kubelet's --max-pods (110 by "
                             "default in Kubernetes): how many pods the schedulers let run on it "
                             "at once (default: no limit, the column left out)")
    parser.add_argument("--bind", choices=ideal.POLICIES, metavar="POLICY",
                        help=f"also write the bindings of one ideal scheduler ({', '.join(ideal.POLICIES)})")
    parser.add_argument("--bind-delay-ms", type=float, default=DEFAULTS.bind_delay_ms,
                        help="with --bind: time from a pod's create to the scheduler's decision; "
                             "the binding commits 1 ms after the decision")
    parser.add_argument("--start", type=time_argument, default=DEFAULTS.start,
                        help="trace start, ISO 8601 (UTC if no offset)")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument("--out", required=True, type=output_path, metavar="FILE",
                        help="trace file to write")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        spec = SynthSpec(
            nodes=args.nodes, pods=args.pods, arrival_rate=args.arrival_rate,
            mean_lifetime=args.mean_lifetime, lifetime_sigma=args.lifetime_sigma,
            max_lifetime_factor=args.max_lifetime_factor,
            node_shapes=tuple(args.node_shape or DEFAULTS.node_shapes),
            pod_shapes=tuple(args.pod_shape or DEFAULTS.pod_shapes),
            heartbeat_interval=args.heartbeat_interval, max_pods=args.max_pods, bind=args.bind,
            bind_delay_ms=args.bind_delay_ms, start=args.start, seed=args.seed)
    except ValueError as err:
        raise ReplayError(str(err)) from None
    result = synthesize(spec, args.out)
    kinds = ", ".join(f"{n} {kind}" for kind, n in result.counts.items() if n)
    print(f"wrote {args.out}: {result.rows} rows" + (f" ({kinds})" if kinds else ""))
    load = result.offered_cpu_load
    print("offered cpu load: no cpu in the cluster to offer it to" if math.isinf(load)
          else f"offered cpu load {load:.0%} of the cluster", file=sys.stderr)
    if result.pending:
        print(f"{result.pending} pods never found a node and stay pending", file=sys.stderr)
    return 0


def _shape(text: str) -> Shape:
    try:
        return Shape.parse(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
