"""kombu's Redis transport, serving a worker's queues in order first and priority second.

Stock kombu asks Redis for every queue's priority-0 list, then every priority-1 list, and
so on, so an urgent CPU job would beat a routine cuda-large job on a big GPU host. fleet
wants the host to drain its most demanding tier first (the queue order the worker was
given), using message priority only within a queue. Selected by ``broker_transport``.
"""
from __future__ import annotations

from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
    def _brpop_start(self, timeout=None):
        # kombu's own method with the two loops swapped: queue-major instead of priority-major
        if timeout is None:
            timeout = self.brpop_timeout
        queues = self._queue_cycle.consume(len(self.active_queues))
        if not queues:
            return
        keys = [self._q_for_pri(queue, pri) for queue in queues
                for pri in self.priority_steps] + [timeout or 0]
        self._in_poll = self.client.connection
        self._brpop_sent_at = kombu_redis.monotonic()
        command_args = ["BRPOP", *keys]
        if self.global_keyprefix:
            command_args = self.client._prefix_args(command_args)
        self.client.connection.send_command(*command_args)


class Transport(kombu_redis.Transport):
    Channel = Channel
