#!/usr/bin/env python3
"""Synthetic proxy telemetry in OpenMetrics text, for `promtool tsdb
create-blocks-from openmetrics` (bench/usage/run). Only the series `bulkhead
advise` reads, with the labels a scrape gives them (bulkhead, class,
instance, job). One file covers [start, end) at one sample per interval.

usage: backfill.py OUT START END INTERVAL CLASSES REPLICAS
"""
import random
import sys

out, start, end, interval, classes, replicas = sys.argv[1], *map(int, sys.argv[2:7])
B = 'bench'
times = range(start, end, interval)
rng = random.Random(start)


def labels(c=None, r=0, extra=''):
    cls = f',class="c{c}"' if c is not None else ''
    return f'{{bulkhead="{B}"{cls},instance="r{r}",job="bulkhead-proxy"{extra}}}'


def gauge_lines(f, name, series):
    """series: list of (label text, value function of sample index)."""
    for lab, value in series:
        f.write(''.join(f'{name}{lab} {value(i)} {t}\n' for i, t in enumerate(times)))


with open(out, 'w') as f:
    # Class c reserves 2 + c % 5 of capacity 400 per replica; class 0 is starved at its ceiling half the time.
    ceiling = {c: 8 + c % 5 for c in range(classes)}
    level = {c: rng.randint(0, ceiling[c]) for c in range(classes)}

    def hw(c, r):
        if c == 0:
            return lambda i: ceiling[c] if (i // 12) % 2 else 2
        base = level[c]
        return lambda i: max(0, min(ceiling[c], base + ((i * 7 + r * 3 + c) % 5) - 2))

    pairs = [(c, r) for c in range(classes) for r in range(replicas)]
    f.write('# TYPE bulkhead_proxy_in_flight_high_water gauge\n')
    gauge_lines(f, 'bulkhead_proxy_in_flight_high_water', [(labels(c, r), hw(c, r)) for c, r in pairs])
    f.write('# TYPE bulkhead_proxy_borrowed_high_water gauge\n')
    gauge_lines(f, 'bulkhead_proxy_borrowed_high_water', [(labels(c, r), (lambda i: 0)) for c, r in pairs])
    f.write('# TYPE bulkhead_proxy_class_ceiling gauge\n')
    gauge_lines(f, 'bulkhead_proxy_class_ceiling', [(labels(c, r), (lambda i, c=c: ceiling[c])) for c, r in pairs])
    f.write('# TYPE bulkhead_proxy_in_flight gauge\n')
    gauge_lines(f, 'bulkhead_proxy_in_flight',
                [(labels(c, r, f',pool="{p}"'), (lambda i, c=c, r=r: hw(c, r)(i) // 2)) for c, r in pairs for p in ('floor', 'surplus')])
    f.write('# TYPE bulkhead_proxy_rejected counter\n')
    for c, r in pairs:
        for reason in ('ceiling', 'surplus-exhausted'):
            rate = 30 if (c == 0 and reason == 'ceiling') else 0
            n0 = (start // interval) * rate // 2
            lab = labels(c, r, ',reason="%s"' % reason)
            f.write(''.join(f'bulkhead_proxy_rejected_total{lab} {n0 + (i + 1) * rate // 2} {t}\n' for i, t in enumerate(times)))
    f.write('# TYPE bulkhead_proxy_request_duration_seconds summary\n')
    for c, r in pairs:
        n0 = start // interval * 100
        lab = labels(c, r)
        f.write(''.join(f'bulkhead_proxy_request_duration_seconds_count{lab} {n0 + (i + 1) * 100} {t}\n' for i, t in enumerate(times)))
        f.write(''.join(f'bulkhead_proxy_request_duration_seconds_sum{lab} {(n0 + (i + 1) * 100) * 0.02:.3f} {t}\n' for i, t in enumerate(times)))
    for name, value in [('capacity', 400), ('shared_surplus', 400 - sum(2 + c % 5 for c in range(classes))),
                        ('shared_surplus_in_use', 10), ('divided_by', 1)]:
        f.write(f'# TYPE bulkhead_proxy_{name} gauge\n')
        gauge_lines(f, f'bulkhead_proxy_{name}', [(labels(None, r), (lambda i, v=value: v)) for r in range(replicas)])
    f.write('# EOF\n')
