"""Volumes: the agent's workspace. A port (`VolumeStorage`) with a host-directory adapter here
(the sidecar) and an S3-prefix adapter in treadle_cloud (the cloud shape); `VolumeService`
resolves a tool call to a volume (the agent's bindings, narrowed for sub-agents), records
ephemeral instances and the file tools' effect journal, and purges ephemeral volumes.

Paths inside a volume are relative POSIX paths; `..`, absolute paths and symlinks that leave the
volume are refused (`paths.clean_path`, and the host adapter re-checks the resolved path)."""
