-- One row per running worker process (its River client id), its beat_at
-- moved to now() every second. A worker killed mid-job (SIGKILL, OOM, a lost
-- host) leaves its jobs "running" in river_job; River's own rescuer frees
-- them only after RescueStuckJobsAfter (2 minutes here) plus up to 30 s of
-- its interval. The other workers see the stale beat within seconds and
-- make those jobs available again (internal/jobs, heartbeat.go). Owned by
-- internal/jobs. UNLOGGED: a row is worthless after a Postgres crash (the
-- live workers write theirs again within a second).

-- +goose Up
CREATE UNLOGGED TABLE worker_heartbeats (
    client_id  text PRIMARY KEY,
    started_at timestamptz NOT NULL DEFAULT now(),
    beat_at    timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE worker_heartbeats;
