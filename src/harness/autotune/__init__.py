"""`harness -m sweep=autotune`: the fastest setting that fits, and how sure that is
(docs/autotune.md). A pure core hands out waves of jobs; command_line, job, reading, replay
and report read harness's files and Hydra's syntax around it."""
