"""nccl-tests output written for tests, in its own column format: Rank lines and the rows of a doubling sweep."""

from collections.abc import Callable


def rank_lines(per_host: list[int], gpu: str = "NVIDIA A100-SXM4-80GB", host: str = "node{h:02d}") -> str:
    """One Rank line per rank, ``per_host[h]`` ranks on host ``host.format(h=h)``, devices 0, 1, ... on each."""
    lines, rank = [], 0
    for h, count in enumerate(per_host):
        for device in range(count):
            lines.append(f"#  Rank {rank:2d} Group  0 Pid {100 + rank} on {host.format(h=h)} device {device} "
                         f"[0x{device:02x}] {gpu}\n")
            rank += 1
    return "".join(lines)


def sweep_rows(exponents: range, algbw_gbytes_per_s: Callable[[int], float], factor: float, redop: str = "sum",
               root: str = "-1", count_divisor: int = 1) -> str:
    """Out-of-place rows of float sizes 2^k, k in ``exponents``: algbw as given, busbw ``factor`` x algbw, 0 wrong
    values; the count column is the size's elements over ``count_divisor`` (the ranks, where it is per rank)."""
    rows = []
    for k in exponents:
        size = 1 << k
        algbw = algbw_gbytes_per_s(size)
        rows.append(f"{size:12d} {size // 4 // count_divisor:12d} float {redop:>6} {root:>4} "
                    f"{size / algbw / 1e3:9.1f} {algbw:7.2f} {algbw * factor:7.2f}  0\n")
    return "".join(rows)
