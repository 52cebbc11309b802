#!/usr/bin/env python3
"""Reads the results TSV of scripts/bench.sh (peer, scenario, run, metric, value, unit) and
prints, as markdown, the medians of every figure and the targets of BENCHMARKS.md as
ratios measured in the same session."""

import os
import statistics
import sys
from collections import defaultdict


def load(path):
    figures = defaultdict(list)
    for line in open(path, encoding="utf-8"):
        fields = line.rstrip("\n").split("\t")
        if len(fields) != 6:
            continue
        peer, scenario, _run, metric, value, _unit = fields
        try:
            number = float(value)
        except ValueError:
            continue
        figures[(peer, scenario, metric)].append(number)
    return figures


def main(path):
    figures = load(path)

    def med(peer, scenario, metric):
        values = figures.get((peer, scenario, metric))
        return statistics.median(values) if values else None

    def fleet(case):
        return med("postback", f"fleet_{case}", "redis_commands_per_delivery")

    def per_delivery_bullmq(scenario, n):
        cpu = med("bullmq", scenario, "redis_cpu")
        return None if cpu is None else cpu * 1e6 / n

    print("| peer | scenario | metric | median | runs |\n|---|---|---|---|---|")
    for (peer, scenario, metric), values in sorted(figures.items()):
        runs = " / ".join(f"{v:g}" for v in values)
        print(f"| {peer} | {scenario} | {metric} | {statistics.median(values):g} | {runs} |")

    ceiling = med("baseline", "wrk-receiver", "requests_per_s")
    batch = med("postback", "burst_batch", "e2e_throughput")
    delivery_only = med("postback", "burst", "delivery_only_throughput")
    rows = [
        ("batch burst e2e throughput (`/notify/batch`), postback / BullMQ `addBulk`", "≥ 4",
         ratio(batch, med("bullmq", "burst", "e2e_throughput"))),
        ("`POST /notify` burst e2e throughput, postback / BullMQ", "≥ 3",
         ratio(med("postback", "burst", "e2e_throughput"), med("bullmq", "burst", "e2e_throughput"))),
        ("burst delivery-only throughput / receiver ceiling (wrk)", "≥ 0.5",
         ratio(delivery_only, ceiling)),
        ("batch burst e2e / postback's delivery-only", "≥ 0.9", ratio(batch, delivery_only)),
        ("idle: Redis commands per second", "≤ 3", med("postback", "idle", "redis_commands_per_second")),
        ("isolation: healthy p99 beside a hanging host / alone", "≤ 1.2",
         med("postback", "isolation", "healthy_p99_ratio")),
        ("burst: postback CPU per delivery (µs)", "", med("postback", "burst", "postback_cpu_per_delivery")),
        ("burst: Redis CPU per delivery (µs), postback", "", med("postback", "burst", "redis_cpu_per_delivery")),
        ("burst: Redis CPU per delivery (µs), BullMQ", "", per_delivery_bullmq("burst", 20000)),
    ]
    for scenario, n in (("burst", 20000), ("retry", 5000), ("delayed", 20000)):
        rows.append((f"{scenario}: Redis CPU per delivery, postback / BullMQ", "≤ 0.33",
                     ratio(med("postback", scenario, "redis_cpu_per_delivery"),
                           per_delivery_bullmq(scenario, n))))
    rows += [
        ("delayed: lateness p99 (ms), postback", "≤ 10", med("postback", "delayed", "lateness_p99")),
        ("delayed: lateness p99, postback / BullMQ", "", ratio(med("postback", "delayed", "lateness_p99"),
                                                               med("bullmq", "delayed", "lateness_p99"))),
        ("retry: retry lateness p99, postback / BullMQ", "", ratio(med("postback", "retry", "retry_lateness_p99"),
                                                                   med("bullmq", "retry", "retry_lateness_p99"))),
        ("backlog: Redis CPU per delivery, 1M pending / 10k pending", "≤ 1.20",
         ratio(med("postback", "backlog_1000000", "redis_cpu_per_delivery"),
               med("postback", "backlog_10000", "redis_cpu_per_delivery"))),
        ("backlog: Redis bytes per pending notification beyond its body", "≤ 300",
         med("postback", "backlog_1000000", "redis_bytes_per_pending_over_body")),
        ("fleet: Redis commands per delivery, 12 shards / 1 shard", "≤ 2",
         ratio(fleet("12s_1i"), fleet("1s_1i"))),
        ("fleet: Redis commands per delivery, 4 instances / 1 (12 shards)", "≤ 1.20",
         ratio(fleet("12s_4i"), fleet("12s_1i"))),
    ]
    rows += limits(med)
    print_fleet(figures)
    print_headroom(med, ceiling, med("bullmq", "burst", "e2e_throughput"))
    print("\n| target | goal | measured |\n|---|---|---|")
    for name, goal, value in rows:
        shown = "NA" if value is None else f"{value:.2f}"
        print(f"| {name} | {goal} | {shown} |")


def limits(med):
    """postback's CPU per unit as a ratio to the machine's own limits measured in the same
    session (`postback-bench limits`): a delivery beside `wrk`'s request to the peers'
    receiver (both an HTTP client's work), a `POST /notify` beside the receiver's request
    (both an HTTP server parsing a JSON body), and a notification registered one at a time
    then delivered (the burst end to end) beside a registration and a delivery each
    measured alone."""
    def total(scenario, phase):
        parts = [med("postback", scenario, f"{phase}_postback_{p}_cpu") for p in ("user", "system")]
        return None if None in parts else sum(parts)

    delivery = total("burst", "delivery_only")
    notify = med("postback", "limits", "notify_postback_cpu")
    e2e = total("burst", "e2e")
    alone = None if None in (delivery, notify) else delivery + notify
    return [
        ("limits: `wrk`'s CPU per request to the peers' receiver (µs)", "",
         med("postback", "limits", "receiver_wrk_cpu")),
        ("limits: the peers' receiver's CPU per request (µs)", "",
         med("postback", "limits", "receiver_cpu")),
        ("limits: postback CPU per `POST /notify`, `wrk` the producer (µs)", "", notify),
        ("limits: postback CPU per delivery, burst delivery-only (µs)", "", delivery),
        ("limits: postback CPU per notification, burst end to end (µs)", "", e2e),
        ("postback CPU per delivery / `wrk`'s per request", "≤ 3",
         ratio(delivery, med("postback", "limits", "receiver_wrk_cpu"))),
        ("postback CPU per `POST /notify` / the receiver's per request", "≤ 2",
         ratio(notify, med("postback", "limits", "receiver_cpu"))),
        ("burst end to end / (`POST /notify` alone + delivery alone), postback CPU", "≤ 1.2",
         ratio(e2e, alone)),
    ]


def print_headroom(med, ceiling, bullmq):
    """For each throughput goal: the most its phase of the burst could reach on these
    cores were postback's own work (user space) free, every core busy with the rest of
    each notification (the store, the harness, postback in the kernel); and what
    postback's own work costs now beside the most the goal leaves it (µs per
    notification; below 0, the goal is out of reach whatever postback does itself)."""
    goals = [
        ("batch burst e2e / BullMQ `addBulk`", "burst_batch", "e2e", bullmq, 4),
        ("`POST /notify` burst e2e / BullMQ", "burst", "e2e", bullmq, 3),
        ("burst delivery-only / receiver ceiling", "burst", "delivery_only", ceiling, 0.5),
    ]
    print("\n| goal | at most, were postback's own work free | postback's own work (µs) "
          "| the most the goal leaves it (µs) |\n|---|---|---|---|")
    for name, scenario, phase, reference, goal in goals:
        def cpu(part):
            return med("postback", scenario, f"{phase}_{part}_cpu")
        others = [cpu(part) for part in ("store", "harness", "postback_system")]
        if None in others or not reference:
            continue
        cores = (os.cpu_count() or 1) * 1e6
        at_most = cores / sum(others) / reference
        room = cores / (reference * goal) - sum(others)
        print(f"| {name} ≥ {goal:g} | {at_most:.2f} | {fmt(cpu('postback_user'))} | {room:.1f} |")


def print_fleet(figures):
    """The fleet scenario's cases, each beside the first (1 shard, 1 instance)."""
    cases = sorted({scenario for (peer, scenario, _) in figures
                    if peer == "postback" and scenario.startswith("fleet_")},
                   key=lambda c: tuple(int(x[:-1]) for x in c.split("_")[1:]))
    if not cases:
        return

    def med(case, metric):
        values = figures.get(("postback", case, metric))
        return statistics.median(values) if values else None

    base = med("fleet_1s_1i", "redis_commands_per_delivery")
    print("\n| shards, instances | Redis commands per delivery (ratio) | after registration "
          "| Redis CPU per delivery (µs) | lateness p99 (ms) |\n|---|---|---|---|---|")
    for case in cases:
        shards, instances = (x[:-1] for x in case.split("_")[1:])
        cmds = med(case, "redis_commands_per_delivery")
        shown = "NA" if cmds is None else f"{cmds:.2f} ({ratio(cmds, base) or 0:.2f})"
        after = med(case, "redis_commands_per_delivery_after_registration")
        cpu, p99 = med(case, "redis_cpu_per_delivery"), med(case, "lateness_p99")
        print(f"| {shards}, {instances} | {shown} | {fmt(after, 2)} | {fmt(cpu)} | {fmt(p99)} |")


def fmt(value, digits=1):
    return "NA" if value is None else f"{value:.{digits}f}"


def ratio(a, b):
    return None if a is None or not b else a / b


if __name__ == "__main__":
    main(sys.argv[1])
