"""Worker function: an SQS batch of step messages → one engine step per record."""

from functions import initialised
from treadle_cloud.worker import SqsWorker

handler = initialised(SqsWorker())
