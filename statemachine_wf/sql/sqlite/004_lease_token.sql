-- Every claim writes a fresh token: the fence that tells a runner whether the task it
-- is committing for is still *its claim*, even when a newer claim has the same worker id
-- (a stable-id restart while the old process is only frozen, or a lease that expired
-- under a live runner and was claimed again by its own other thread).
ALTER TABLE wf_tasks ADD COLUMN lease_token TEXT;
