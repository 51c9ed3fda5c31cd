"""A genuine one-shot all-reduce on gloo, a candidate for the crossover search on CPU ranks."""

import torch
import torch.distributed as dist

from commprof.impls.base import AllReduceImpl


class OneShotGloo(AllReduceImpl):
    """Every rank gathers every rank's tensor and sums them itself (what a one-shot kernel does over peer memory)."""

    name = "one-shot-gloo"

    def all_reduce(self, x):
        ranks = dist.get_world_size(self.group)
        gathered = torch.empty((ranks * x.shape[0], *x.shape[1:]), dtype=x.dtype)  # gloo: ranks stacked on dim 0
        # torch 2.13's name for all_gather_into_tensor; older releases have only the old one
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        gather(gathered, x.contiguous(), group=self.group)
        return gathered.view(ranks, *x.shape).sum(dim=0, dtype=torch.float32).to(x.dtype)
