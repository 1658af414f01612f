-- usage_hourly rows belong to a period. A period rarely starts on the hour
-- (10:37), so the hour it starts in holds usage of two periods: the end of
-- the previous one (10:00-10:37, and what the worker flushed of it after
-- 10:37) and the start of the new one. Keyed by the hour alone, the
-- dashboard could only keep that hour whole (over-counting the new period)
-- or drop it (losing its first minutes). With period_start in the key each
-- period's part is its own row, and the charts select by period.
--
-- Existing rows are attributed from the durable periods (usage_periods) of
-- the same tenant and meter: to the period the hour starts in, else to the
-- period starting within it (the tenant's first period), else (a row no
-- durable period explains, which the writers never make) to the hour
-- itself. In an hour two periods share, the new period's part is what its
-- usage events (by timestamp) and flushes (by flush time) still on record
-- prove was in that hour, at most the row; the rest stays with the earlier
-- period, so no period is shown more than it used.

-- +goose Up
ALTER TABLE usage_hourly ADD COLUMN period_start timestamptz;

UPDATE usage_hourly h SET period_start = coalesce(
    (SELECT p.period_start FROM usage_periods p
      WHERE p.tenant_id = h.tenant_id AND p.meter = h.meter
        AND p.period_start <= h.hour AND h.hour < p.period_end
      ORDER BY p.period_start DESC LIMIT 1),
    (SELECT p.period_start FROM usage_periods p
      WHERE p.tenant_id = h.tenant_id AND p.meter = h.meter
        AND p.period_start > h.hour AND p.period_start < h.hour + interval '1 hour'
      ORDER BY p.period_start LIMIT 1),
    h.hour);

ALTER TABLE usage_hourly ALTER COLUMN period_start SET NOT NULL;
ALTER TABLE usage_hourly DROP CONSTRAINT usage_hourly_pkey;
-- period before meter: the dashboard reads one tenant's period, every meter.
ALTER TABLE usage_hourly ADD PRIMARY KEY (tenant_id, period_start, meter, hour);

WITH shared AS (
    -- hours a later period starts in, with the row of the earlier one
    SELECT DISTINCT ON (h.tenant_id, h.meter, h.hour)
           h.tenant_id, h.meter, h.hour, h.period_start AS old_start, p.period_start AS new_start, h.used
      FROM usage_hourly h
      JOIN usage_periods p ON p.tenant_id = h.tenant_id AND p.meter = h.meter
       AND p.period_start > h.hour AND p.period_start < h.hour + interval '1 hour'
       AND p.period_start > h.period_start
     ORDER BY h.tenant_id, h.meter, h.hour, p.period_start DESC
), ev AS (
    SELECT s.tenant_id, s.meter, s.hour, sum(e.quantity) AS n
      FROM shared s JOIN usage_events e ON e.tenant_id = s.tenant_id AND e.meter = s.meter
       AND e.period_start = s.new_start AND e.occurred_at >= s.hour AND e.occurred_at < s.hour + interval '1 hour'
     GROUP BY 1, 2, 3
), fl AS (
    SELECT s.tenant_id, s.meter, s.hour, sum(f.quantity) AS n
      FROM shared s JOIN usage_flushes f ON f.tenant_id = s.tenant_id AND f.meter = s.meter
       AND f.period_start = s.new_start AND f.flushed_at >= s.hour AND f.flushed_at < s.hour + interval '1 hour'
     GROUP BY 1, 2, 3
), moved AS (
    SELECT s.tenant_id, s.meter, s.hour, s.old_start, s.new_start,
           least(s.used, greatest(coalesce(ev.n, 0) + coalesce(fl.n, 0), 0))::bigint AS n
      FROM shared s
      LEFT JOIN ev USING (tenant_id, meter, hour)
      LEFT JOIN fl USING (tenant_id, meter, hour)
), ins AS (
    INSERT INTO usage_hourly (tenant_id, period_start, meter, hour, used)
    SELECT tenant_id, new_start, meter, hour, n FROM moved WHERE n > 0
    ON CONFLICT (tenant_id, period_start, meter, hour) DO UPDATE SET used = usage_hourly.used + EXCLUDED.used
)
UPDATE usage_hourly h SET used = h.used - m.n
  FROM moved m
 WHERE m.n > 0 AND h.tenant_id = m.tenant_id AND h.period_start = m.old_start
   AND h.meter = m.meter AND h.hour = m.hour;

-- +goose Down
ALTER TABLE usage_hourly DROP CONSTRAINT usage_hourly_pkey;
WITH gone AS (DELETE FROM usage_hourly RETURNING tenant_id, meter, hour, used)
INSERT INTO usage_hourly (tenant_id, meter, hour, period_start, used)
SELECT tenant_id, meter, hour, hour, sum(used) FROM gone GROUP BY 1, 2, 3;
ALTER TABLE usage_hourly DROP COLUMN period_start;
ALTER TABLE usage_hourly ADD PRIMARY KEY (tenant_id, meter, hour);
