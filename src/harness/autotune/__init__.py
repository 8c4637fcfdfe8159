"""`harness -m sweep=autotune`: the fastest setting that fits, and how sure that is.

The search is a pure core that hands out waves of jobs and is told how each ended; it
never launches anything, so the same code runs behind the Hydra sweeper
(hydra_plugins/harness_launcher/autotune_sweeper.py), the unit tests' planted landscape,
and `harness-report DIR` (a replay of the job directories). docs/autotune.md says how it
searches.

The core, which imports only the standard library and itself:
  space      the keys searched, their values as typed, roles, and what "simpler" means
  settings   every `autotune.*` key with its default, and the job budget
  outcome    what one job said (status, the objective's figures, trust), as the core reads it
  stats      a candidate's figure in a stage (compile charged), its spread, ties
  knowledge  what the search knows (jobs, outcomes, decisions) and may still spend (budget)
  fit        the batch ladder: the largest batch that fits, and the calibration
  screen     one key at a time around the incumbent, and the batch recheck
  halving    successive halving, the winner and the confirm stage
  search     the driver: waves out, outcomes in, the stages in order
  verdict    autotune.json's body and the one verdict line

Around it, the only modules that read harness's files and Hydra's syntax:
  command_line  the space from the command line and the named sweep's `auto` lines
  job           the overrides of one job (steps, stage, round), and the keys autotune sets
  reading       a job directory's result.json read as an Outcome (issue #20's trust flags)
  replay        the sweep directory's jobs answering the waves again; autotune.json and
                the verdict rebuilt (what `harness-report DIR` and the sweep's end print)
"""
