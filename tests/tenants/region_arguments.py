"""The arguments every region-timing tenant takes (regions.py, set_regions.py,
torch_regions.py): how many regions, repeats in each, a random pause before
each, work left queued before each, and how much longer each is held."""

import argparse


def region_arguments(repeats: int, noise: str) -> argparse.ArgumentParser:
    """A parser with those arguments (`repeats` by default, `noise` the help
    of --noise); each tenant adds what it measures."""
    p = argparse.ArgumentParser()
    p.add_argument("--regions", type=int, default=3)
    p.add_argument("--repeats", type=int, default=repeats)
    p.add_argument("--pause-ms", type=float, default=0.0)
    p.add_argument("--noise", type=int, default=0, help=noise)
    p.add_argument("--hold-s", type=float, default=0.0)
    return p
