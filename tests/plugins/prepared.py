"""An all-reduce with a preparation, as FlashInfer's tuning and b12x's compilation have: run once by the sweep
before its points, it leaves a file in the setting's state folder that every point of the setting then finds."""

import torch.distributed as dist

from commprof.impls.base import AllReduceImpl


class Prepared(AllReduceImpl):
    """gloo's all-reduce; `flavour` names two settings, each prepared into a folder of its own."""

    name = "prepared"
    option_kinds = {"flavour": ("a", "b")}

    @classmethod
    def preparation(cls, backend, options):
        return f"writes flavour {options.get('flavour', 'a')} into its state folder"

    def setup(self, group, plan, device):
        super().setup(group, plan, device)
        state = self.state_dir / "prepared.txt"
        self.found = state.read_text() if state.exists() else None
        if self.found is None:
            state.parent.mkdir(parents=True, exist_ok=True)
            state.write_text(self.options.get("flavour", "a"))

    def all_reduce(self, x):
        dist.all_reduce(x, group=self.group)
        return x

    def detail(self):
        return f"found flavour {self.found} prepared" if self.found else "prepared now"
