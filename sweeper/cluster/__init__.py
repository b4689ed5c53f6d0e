"""Ray: how a sweep meets it and what it asks of it.

`start` opens the Ray a sweep runs on: a local one (`local_ray`: confined to loopback, dead with
its driver; its dashboard's port and failures in `dashboard`), or a cluster by address, probed
first (`address`) and joined in bounded time (`bounded_connect`); `watchdog` kills what a local
one left once its driver is gone.  `submission` turns the plan's missing work into Ray tasks
with their resources and dependencies, and `tasks` holds those tasks' bodies (read inputs from
the store, do the work in `jobs`, write back).  Only this package imports Ray's task API.
"""
