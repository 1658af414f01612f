package limitstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// Dirty marks (keyspace.Keys.DirtyBase): the decision script adds
// a counter's mark (keyspace.Keys.Mark) to <p>:dirty:q when the counter turns from
// flushed to unflushed, and adds
// refusals to the score of their hash in <p>:dirty:rf. On a Redis Cluster
// there is one of each per slot (<p>:{<slot tag>}:dirty:…). The flush reads
// the marks instead of scanning the keyspace, so a pass costs in proportion
// to the tenants that were active, not to the keys Redis holds.

// readDirty runs read on every node that may hold dirty marks named by
// names (every shard of a Ring, the owning masters of a Cluster, in one
// pipeline) and returns the replies.
func (s *Store) readDirty(ctx context.Context, names []string, read func(redis.Pipeliner, string) redis.Cmder, each func(name string, c redis.Cmder) error) error {
	pipe := func(ctx context.Context, c redis.Cmdable) error {
		cmds := make([]redis.Cmder, len(names))
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, n := range names {
				cmds[i] = read(p, n)
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		for i, n := range names {
			if err := each(n, cmds[i]); err != nil {
				return err
			}
		}
		return nil
	}
	if r, ok := s.rdb.(*redis.Ring); ok {
		var mu sync.Mutex
		return r.ForEachShard(ctx, func(ctx context.Context, sh *redis.Client) error {
			mu.Lock() // each is not safe for concurrent use
			defer mu.Unlock()
			return pipe(ctx, sh)
		})
	}
	return pipe(ctx, s.rdb) // a Cluster pipeline goes to each slot's master
}

// DirtyPendingBatches calls fn with the counters marked dirty, in batches
// of at most max that ClaimPendingBatch and AckPendingBatch may take in
// one script: on a Cluster the counters of one slot (one dirty set), on a
// Ring one counter (a script runs on the shard of its first key), else
// any.
func (s *Store) DirtyPendingBatches(ctx context.Context, max int, fn func([]PendingKey) error) error {
	if max < 1 {
		max = 1
	}
	if _, ring := s.rdb.(*redis.Ring); ring {
		max = 1
	}
	groups := map[string][]PendingKey{}
	var order []string
	err := s.DirtyPending(ctx, func(k PendingKey) error {
		g := s.keys.DirtyPending(k.Tenant)
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], k)
		return nil
	})
	if err != nil {
		return err
	}
	for _, g := range order {
		ks := groups[g]
		for len(ks) > 0 {
			n := min(max, len(ks))
			if err := fn(ks[:n]); err != nil {
				return err
			}
			ks = ks[n:]
		}
	}
	return nil
}

// sremAll is Lua for the batch scripts: their marks to remove go in one
// SREM per thousand instead of one per counter (every command a script
// runs costs Redis about a microsecond, and a pass over 1,000 counters
// removed up to 2,000 marks one by one). Each mark appears once in a
// batch, so removing it at the end of the script is the same as in place.
// mark is the counter's mark (Keys.Mark) made from its state hash's name
// (Keys.State, "<p>:{t:<tenant>}:st") and suffix, so that the claim need
// not be sent it for the few marks it removes.
const sremAll = `
local function sremAll(d, ms)
  for i = 1, #ms, 1000 do
    redis.call('SREM', d, unpack(ms, i, math.min(i + 999, #ms)))
  end
end
local function mark(h, sfx)
  return string.sub(h, 1, -3) .. 'qp:' .. sfx
end
`

// A counter's claim is pending while ci (its id) is set and differs from
// ca (the last acknowledged claim's id): the claim writes ci, cn and f in
// one HSET, and the acknowledgement is one HSET of ca, so a counter
// flushed by a pass costs Redis two commands in each script (a read and a
// write), the least a claim and an acknowledgement that must see the
// counter can do. ci and cn stay after the acknowledgement, to be
// overwritten by the next claim. (Until the acknowledgement deleted ci and
// cn: a hash written so reads the same, ci absent meaning no claim, and a
// worker of that version reads a hash written by this one correctly too,
// an acknowledged claim that it takes as pending being committed again
// under its own id, which adds nothing, and acknowledged.)

// claimBatchScript claims several counters of one dirty set: KEYS are the
// tenants' state hashes, one per counter, then the dirty set; ARGV per
// counter its suffix and a new claim ID. A claim moves what is unflushed
// (q − f) into the claim fields and advances the flushed mark to q, in the
// counter's own hash, so that decisions meanwhile just add to q. Per
// counter it returns the ID and units of the claim (an earlier
// unacknowledged claim as it was), or "" and 0 when there was nothing to
// flush (the mark goes) or the counter is missing and awaits its rebuild
// (the mark stays while g holds usage for it), and the counter's flush
// sequence cs (what Postgres had counted at the last acknowledgement; 0
// when unknown): Postgres tells a claim of a rolled-back hash by it. cn
// and g are read only on the rare paths.
//
// With the counter, the claim takes what each grant of its meter gave
// since the last claim (kf − remaining, keyspace.GrantsOf, with their ids in keyspace.GrantIDsOf): the grants'
// flushed marks move to their remaining, and the claim keeps "<grant id> <units> " each in kc,
// returned with it (also when an unacknowledged claim is returned again),
// so that the flush records each grant's draws under the claim's id, in
// the transaction that counts the usage. Draws are attributed to the
// period of the counter claimed first (a flush interval at a period's
// boundary may give the old period a few of the new one's draws). A
// tenant without grants costs the claim two HMGET fields (and their names) more.
var claimBatchScript = redis.NewScript(sremAll + `
local d = KEYS[#KEYS]
local out, gone = {}, {}
for i = 1, #KEYS - 1 do
  local h, sfx = KEYS[i], ARGV[2 * i - 1]
  local ci, q, f = 'ci:' .. sfx, 'q:' .. sfx, 'f:' .. sfx
  local gm = string.match(sfx, '^(.*):[^:]*$')
  local r = redis.call('HMGET', h, ci, 'ca:' .. sfx, q, f, 'cs:' .. sfx, 'GN:' .. gm, 'GI:' .. gm)
  out[4 * i - 3] = ''; out[4 * i - 2] = 0; out[4 * i - 1] = r[5] or '0'; out[4 * i] = ''
  if r[1] and r[1] ~= r[2] then
    out[4 * i - 3] = r[1]; out[4 * i - 2] = tonumber(redis.call('HGET', h, 'cn:' .. sfx)) or 0
    out[4 * i] = redis.call('HGET', h, 'kc:' .. sfx) or ''
  elseif not r[3] then
    if redis.call('HEXISTS', h, 'g:' .. sfx) == 0 then gone[#gone + 1] = mark(h, sfx) end
  else
    local n = tonumber(r[3]) - (tonumber(r[4]) or 0)
    local kc = ''
    if r[6] then
      local G = r[6]
      local ids, fs = {}, {}
      for id in string.gmatch(r[7] or '', '(%S+) ') do
        ids[#ids + 1] = id; fs[#fs + 1] = 'kf:' .. id
      end
      if #fs > 0 then
        local kf = redis.call('HMGET', h, unpack(fs))
        local w = {}
        for j = 1, #ids do
          local rem = struct.unpack('<d', G, #G - 24 * j + 17) -- stored last drawn first
          local was = tonumber(kf[j])
          if was and was ~= rem then
            kc = kc .. ids[j] .. ' ' .. string.format('%d', was - rem) .. ' '
            w[#w + 1] = fs[j]; w[#w + 1] = string.format('%d', rem)
          end
        end
        if #w > 0 then redis.call('HSET', h, unpack(w)) end
      end
    end
    if n == 0 and kc == '' then
      gone[#gone + 1] = mark(h, sfx)
    else
      local id = ARGV[2 * i]
      redis.call('HSET', h, ci, id, 'cn:' .. sfx, n, f, r[3], 'kc:' .. sfx, kc)
      out[4 * i - 3] = id; out[4 * i - 2] = n; out[4 * i] = kc
    end
  end
end
sremAll(d, gone)
return out
`)

// ackBatchScript acknowledges several claims of one dirty set (KEYS as
// claimBatchScript's, ARGV per counter its suffix, the claim ID to
// acknowledge, "" to skip it, its mark, and the flush sequence Postgres
// gave it, "" when unknown). The mark goes when the counter has nothing
// unflushed left. The sequence is written to cs with ca, in the same HSET.
//
// An acknowledgement that finds neither its claim nor its ID as the last
// acknowledged one means Redis lost the hash while the claim was being
// committed: the units are in Postgres, and a counter rebuilt meanwhile
// may have read Postgres before or after that commit. So it moves the
// epoch (a rebuild in flight reads Postgres again), and deletes a counter
// rebuilt meanwhile, keeping its unflushed growth in g, so that the next
// decision rebuilds it from Postgres as it is now (see the limiter's
// seedLua). Any other claim of the counter goes with it (its own
// acknowledgement then does the same). ca is read only on that path: a
// claim found in ci is acknowledged whatever ca holds (a replayed
// acknowledgement writes the same ca again).
//
// A claim Postgres found stale (the hash is behind Postgres: a replica
// promoted after losing writes) is acknowledged by rebasing the counter
// instead (ARGV 5 per counter: Postgres's durable usage, "" for a normal
// acknowledgement): the claim's units were the old master's, counted
// already, so they are dropped; f becomes the durable usage and q that
// plus what was counted since the claim (q − f), and cs Postgres's
// sequence, so the next claim is counted again.
var ackBatchScript = redis.NewScript(sremAll + `
local d = KEYS[#KEYS]
local gone = {}
for i = 1, #KEYS - 1 do
  local h, sfx, id, seq, dur = KEYS[i], ARGV[5 * i - 4], ARGV[5 * i - 3], ARGV[5 * i - 1], ARGV[5 * i]
  if id ~= '' then
    local r = redis.call('HMGET', h, 'ci:' .. sfx, 'q:' .. sfx, 'f:' .. sfx)
    if r[1] == id and dur ~= '' then
      local du = tonumber(dur)
      local nq = du + (tonumber(r[2]) or 0) - (tonumber(r[3]) or 0)
      redis.call('HSET', h, 'q:' .. sfx, nq, 'f:' .. sfx, du, 'ca:' .. sfx, id, 'cs:' .. sfx, seq)
      if nq == du then gone[#gone + 1] = ARGV[5 * i - 2] end
    elseif r[1] == id then
      if seq ~= '' then
        redis.call('HSET', h, 'ca:' .. sfx, id, 'cs:' .. sfx, seq)
      else
        redis.call('HSET', h, 'ca:' .. sfx, id)
      end
      if not r[2] or r[2] == r[3] or tonumber(r[2]) == (tonumber(r[3]) or 0) then gone[#gone + 1] = ARGV[5 * i - 2] end
    elseif redis.call('HGET', h, 'ca:' .. sfx) ~= id then
      redis.call('HINCRBY', h, 'e', 1)
      if r[2] then
        local u = tonumber(r[2]) - (tonumber(r[3]) or 0)
        if u ~= 0 then
          redis.call('HINCRBY', h, 'g:' .. sfx, u)
          redis.call('SADD', d, ARGV[5 * i - 2])
        end
        redis.call('HDEL', h, 'q:' .. sfx, 'f:' .. sfx, 'ci:' .. sfx, 'cn:' .. sfx, 'cs:' .. sfx)
      end
      if redis.call('PTTL', h) < 0 then redis.call('PEXPIRE', h, 3456000000) end
    end
  end
end
sremAll(d, gone)
return 0
`)

// batchArgs returns the claim script's KEYS and ARGV for ks, with ids[i]
// as the claim ID of ks[i].
func (s *Store) batchArgs(ks []PendingKey, ids []string) ([]string, []any) {
	keys := make([]string, 0, len(ks)+1)
	args := make([]any, 0, 2*len(ks))
	for i, k := range ks {
		keys = append(keys, s.keys.State(k.Tenant))
		args = append(args, keyspace.CounterOf(k.Meter, k.PeriodStart).Suffix, ids[i])
	}
	return append(keys, s.keys.DirtyPending(ks[0].Tenant)), args
}

// ClaimPendingBatch is ClaimPending for a batch of DirtyPendingBatches in
// one script: claims[i] is the claim of ks[i], with N 0 when it had
// nothing to flush.
func (s *Store) ClaimPendingBatch(ctx context.Context, ks []PendingKey) ([]Claim, error) {
	if len(ks) == 0 {
		return nil, nil
	}
	ids := make([]string, len(ks))
	for i := range ids {
		ids[i] = newID()
	}
	keys, args := s.batchArgs(ks, ids)
	res, err := claimBatchScript.Run(ctx, s.rdb, keys, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("limitstore: claiming pending usage: %w", err)
	}
	if len(res) != 4*len(ks) {
		return nil, fmt.Errorf("limitstore: claiming pending usage: reply of %d elements for %d counters", len(res), len(ks))
	}
	out := make([]Claim, len(ks))
	for i := range ks {
		id, ok1 := res[4*i].(string)
		n, ok2 := res[4*i+1].(int64)
		seqS, ok3 := res[4*i+2].(string)
		seq, err := strconv.ParseInt(seqS, 10, 64)
		kc, ok4 := res[4*i+3].(string)
		if !ok1 || !ok2 || !ok3 || !ok4 || err != nil {
			return nil, fmt.Errorf("limitstore: claiming pending usage: malformed reply")
		}
		out[i] = Claim{ID: id, N: n, Seq: seq}
		if out[i].Grants, err = parseGrantDraws(kc); err != nil {
			return nil, fmt.Errorf("limitstore: claiming pending usage: %w", err)
		}
	}
	return out, nil
}

// Ack is the acknowledgement of one claim: ID "" leaves the counter alone.
// Seq is the counter's flush sequence in Postgres after the commit (0
// unknown: cs is left as it is). Stale says Postgres found the claim's
// hash behind it (a rollback): the counter is rebased on Durable, its
// durable usage, and the claim's units dropped (see ackBatchScript).
type Ack struct {
	ID      string
	Seq     int64
	Stale   bool
	Durable int64
}

// AckPendingBatch is AckPending for a batch of DirtyPendingBatches in one
// script; acks[i] acknowledges the claim of ks[i].
func (s *Store) AckPendingBatch(ctx context.Context, ks []PendingKey, acks []Ack) error {
	if len(ks) == 0 {
		return nil
	}
	keys := make([]string, 0, len(ks)+1)
	args := make([]any, 0, 5*len(ks))
	for i, k := range ks {
		a := acks[i]
		seq, dur := "", ""
		if a.Seq > 0 && a.ID != "" {
			seq = strconv.FormatInt(a.Seq, 10)
		}
		if a.Stale && a.ID != "" {
			dur = strconv.FormatInt(a.Durable, 10)
			if seq == "" {
				seq = "0"
			}
		}
		keys = append(keys, s.keys.State(k.Tenant))
		args = append(args, keyspace.CounterOf(k.Meter, k.PeriodStart).Suffix, a.ID, s.keys.Mark(k.Tenant, k.Meter, k.PeriodStart), seq, dur)
	}
	keys = append(keys, s.keys.DirtyPending(ks[0].Tenant))
	if err := ackBatchScript.Run(ctx, s.rdb, keys, args...).Err(); err != nil {
		return fmt.Errorf("limitstore: acknowledging flush: %w", err)
	}
	return nil
}

// DirtyPending calls fn once per counter marked dirty (limiter-counted
// usage not yet flushed, or a claimed flush not yet acknowledged). The
// mark stays until AckPending (or ClaimPending finding nothing) sees the
// counter fully flushed, so a crash anywhere leaves it for the next pass.
func (s *Store) DirtyPending(ctx context.Context, fn func(PendingKey) error) error {
	var keys []PendingKey
	seen := map[string]bool{}
	err := s.readDirty(ctx, s.keys.AllDirty("q"),
		func(p redis.Pipeliner, n string) redis.Cmder { return p.SMembers(ctx, n) },
		func(_ string, c redis.Cmder) error {
			ms, err := c.(*redis.StringSliceCmd).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				return err
			}
			for _, m := range ms {
				pk, id, ok := s.parsePending(m)
				if ok && !seen[id] {
					seen[id] = true
					keys = append(keys, pk)
				}
			}
			return nil
		})
	if err != nil {
		return fmt.Errorf("limitstore: reading dirty counters: %w", err)
	}
	for _, k := range keys {
		if err := fn(k); err != nil {
			return err
		}
	}
	return nil
}

// RefusalMark is a refusal hash marked dirty: Score is the refusals added
// to it since it was last cleared.
type RefusalMark struct {
	Tenant string
	Day    time.Time
	Key    string
	Score  float64
	set    string
}

// DirtyRefusals returns the refusal hashes marked dirty.
func (s *Store) DirtyRefusals(ctx context.Context) ([]RefusalMark, error) {
	var out []RefusalMark
	err := s.readDirty(ctx, s.keys.AllDirty("rf"),
		func(p redis.Pipeliner, n string) redis.Cmder { return p.ZRangeWithScores(ctx, n, 0, -1) },
		func(name string, c redis.Cmder) error {
			zs, err := c.(*redis.ZSliceCmd).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				return err
			}
			for _, z := range zs {
				key, _ := z.Member.(string)
				m := RefusalMark{Key: key, Score: z.Score, set: name}
				if t, day, ok := s.parseRefusalKey(key); ok {
					m.Tenant, m.Day = t, day
				}
				out = append(out, m)
			}
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("limitstore: reading dirty refusals: %w", err)
	}
	return out, nil
}

var clearMarkScript = redis.NewScript(`
if tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1])) == tonumber(ARGV[2]) then
  return redis.call('ZREM', KEYS[1], ARGV[1])
end
return 0
`)

// ClearRefusalMark removes the mark once the hash's counts are stored,
// unless refusals were added meanwhile (its score moved): then it stays
// for the next pass. A mark of a malformed key (Tenant "") is cleared too.
func (s *Store) ClearRefusalMark(ctx context.Context, m RefusalMark) error {
	err := clearMarkScript.Run(ctx, s.rdb, []string{m.set}, m.Key, strconv.FormatFloat(m.Score, 'f', -1, 64)).Err()
	if err != nil {
		return fmt.Errorf("limitstore: clearing refusal mark: %w", err)
	}
	return nil
}

// RefusalsOf returns the refusals per policy of a marked hash.
func (s *Store) RefusalsOf(ctx context.Context, m RefusalMark) (map[string]int64, error) {
	return s.Refusals(ctx, m.Tenant, m.Day)
}

// parseRefusalKey parses "<p>:{t:<tenant>}:rf:<yyyymmdd>".
func (s *Store) parseRefusalKey(key string) (string, time.Time, bool) {
	rest, ok := strings.CutPrefix(key, s.keys.Base()+":{t:")
	if !ok {
		return "", time.Time{}, false
	}
	i := strings.Index(rest, "}:rf:")
	if i < 0 {
		return "", time.Time{}, false
	}
	day, err := time.Parse("20060102", rest[i+5:])
	if err != nil {
		return "", time.Time{}, false
	}
	return rest[:i], day, true
}

// AdoptUnmarked gives a dirty mark to every counter with unflushed usage or
// a claim found by one SCAN of the keyspace (ScanPending). Counters whose
// mark was lost (a dirty set evicted, or restored apart from the hashes)
// are found once, when a worker starts; afterwards the marks alone are
// read.
func (s *Store) AdoptUnmarked(ctx context.Context) (int, error) {
	n := 0
	err := s.ScanPending(ctx, func(k PendingKey) error {
		n++
		if err := s.rdb.SAdd(ctx, s.keys.DirtyPending(k.Tenant), s.keys.Mark(k.Tenant, k.Meter, k.PeriodStart)).Err(); err != nil {
			return err
		}
		return s.rdb.Expire(ctx, s.keys.DirtyPending(k.Tenant), 40*24*time.Hour).Err()
	})
	if err != nil {
		return n, err
	}
	return n, nil
}
