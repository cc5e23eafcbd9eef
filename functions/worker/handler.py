"""Worker function: an SQS batch of step messages → one engine step per record."""

from treadle_cloud.worker import SqsWorker

handler = SqsWorker()
