"""Two ranks on GPU 0 in one NCCL group (tools/gpu_check.sh env): does NCCL accept it?"""

import os

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
torch.cuda.set_device(0)
dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
t = torch.ones(4, device="cuda") * (rank + 1)
try:
    dist.all_reduce(t)
    torch.cuda.synchronize()
    print(f"rank {rank}: NCCL all_reduce with two ranks on one GPU: {t.tolist()}")
except Exception as e:  # the answer we are after, whichever it is
    print(f"rank {rank}: NCCL refused two ranks on one GPU: {type(e).__name__}: {str(e)[:200]}")
finally:
    dist.destroy_process_group()
