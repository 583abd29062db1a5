"""A gang member's place in its formed gang, and how its process is launched there:
torch.distributed's variables, and torchrun's argv for a node with more than one GPU.

torchrun meets its nodes through a static rendezvous: fleet's node rank is torchrun's
``--node_rank``, and rank 0's host serves the store at the address and port it advertised.
torchrun's c10d rendezvous would order the nodes itself (by host name and pid), so torch's
rank 0 could run on a host whose output fleet neither reads nor uploads, and it picks the
host that serves its store by matching host names, which fails where a host name resolves
to a loopback address (Debian's 127.0.1.1)."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from state.gang import Member
from trainers.protocol import ENV_NODES


@dataclass(frozen=True)
class Seat:
    """This member's place in a formed gang."""

    rank: int  # its node rank
    members: tuple[Member, ...]  # every member, by rank

    @property
    def nodes(self) -> int:
        return len(self.members)

    def environment(self, gpus: int) -> dict[str, str]:
        """torch.distributed's variables for the job's process on this host. With more than
        one GPU per node, torchrun (``argv``) sets RANK and LOCAL_RANK per process."""
        master, per_node = self.members[0], max(1, gpus)
        env = {
            "MASTER_ADDR": master.addr,
            "MASTER_PORT": str(master.port),
            "WORLD_SIZE": str(self.nodes * per_node),
            "LOCAL_WORLD_SIZE": str(per_node),
            "NODE_RANK": str(self.rank),
            ENV_NODES: str(self.nodes),
        }
        if per_node == 1:
            env.update(RANK=str(self.rank), LOCAL_RANK="0")
        return env

    def argv(self, argv: list[str], gpus: int, rdzv_id: str) -> list[str]:
        """The job's argv, under torchrun when the node runs one process per GPU: node rank R
        runs global ranks R*gpus .. R*gpus+gpus-1, so rank 0 runs on fleet's rank 0 host."""
        if gpus <= 1:
            return argv
        master = self.members[0]
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nnodes={self.nodes}",
            f"--node_rank={self.rank}",
            f"--nproc_per_node={gpus}",
            "--rdzv_backend=static",
            f"--master_addr={master.addr}",
            f"--master_port={master.port}",
            f"--rdzv_id={rdzv_id}",
            "--no-python",
            *argv,
        ]

    @property
    def token(self) -> str:
        """This member's own seat (its delivery's token; the run's is the gang's)."""
        return next(m.seat for m in self.members if m.rank == self.rank)
