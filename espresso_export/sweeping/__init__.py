"""``sweep``: score and time every (depth, width) cut of one model in memory, to pick what ``shrink`` should build.

The settings (:mod:`espresso_export.sweeping.sweep_settings`) and the result with its plot
(:mod:`espresso_export.sweeping.sweep_result`, :mod:`espresso_export.sweeping.plots`) load without torch; the
measuring is :mod:`espresso_export.sweeping.sweep`."""
