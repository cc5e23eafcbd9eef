"""The workspace tools, with loomcycle's argument shapes (Claude Code's tools over volumes):
Read, Write, Edit, Grep, Glob, NotebookEdit and the restricted Bash. See docs/workspace.md."""
