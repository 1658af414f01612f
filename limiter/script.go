package limiter

import (
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// countRefusalBody defines count_refusal, shared by decideBody and fastBody.
var countRefusalBody = luaFragment("count_refusal")

// decideBody checks and takes every policy of one decision, all or
// nothing. The only clock is Redis TIME.
//
// ARGV: 1 cost taken, 2 peek (0, or the cost asked about), 3 count refusals
// (0|1), 4 the tenant's key base ("<p>:{t:<tenant>}:"), 5 lease id, 6 seed
// required (0|1), 7 number of policies, 8 dirty marks' prefix
// (keyNames.dirtyBase), then per policy its type, name and:
//
//	r rate        ei (emission interval µs), burst               fields r, x of KEYS[1]
//	q quota       limit, hard(1)|soft(0), end ms, next end ms,   fields of KEYS[1]
//	              q and f field of the current period, of the next,
//	              the period's start ms (0: unknown; before it the
//	              reply is {5, 0}: decide on the window before)
//	c concurrency limit, lease TTL ms                            its own KEY (a sorted set)
//	w window      limit, length ms                               its own KEY (a hash)
//
// KEYS[1] is the hash holding the bucket and the period counters (the
// tenant's state hash, keyNames.state; for explicit Limits their bucket's
// hash): a decision reads it with one HMGET and writes it with one HSET,
// and sets its expiry only when a field needs it to live longer ("x"
// remembers what was set). What the flush has not moved yet is q − f,
// so no second counter is written per decision; the counter's mark goes
// into the dirty set only when it turns from flushed (q = f) to not.
//
// The dirty marks are the one key not in KEYS: in a Cluster their name
// carries a hash tag of the tenant's own slot, and on one node or a Ring
// they are written where the script runs, which is what the worker reads.
//
// One more ARGV after the policies asks for the tenant's stored snapshot,
// whose key is then the last KEY: it is appended to the reply (false when
// missing), so that the near-cache's safety re-read rides on the decision.
//
// Reply: {status, refusing index (1-based, 0 none), retry ms, now ms, then
// per policy: remaining, reset ms, period (quota: 0 current, 1 next)}.
// status 1 allowed, 0 refused, 2 needs seed: then the reply is
// {2, n, epoch, idx1, period1, ...} naming the quotas whose counter is
// missing, with the hash's epoch for the seed script.
var decideBody = luaFill("decide_func", map[string]string{"count_refusal": countRefusalBody, "grants": grantsLua, "grant_drawn": luaFragment("grant_drawn")})

// fastBody is decideBody's decision for the common plan, a token bucket
// and one quota, checked and taken at cost (no peek, no concurrency slot,
// not a lease take), in flat locals: per-policy tables, string work,
// number parsing and each ARGV (Redis makes an object of it and Lua
// interns it) are most of what the general decision costs Redis. It
// decides exactly as decide() does and hands the rare case to it (a
// counter missing: seeds and the counting while it is missing stay in one
// place).
//
// ARGV: 1 cost; 2 the plan, packed: little-endian doubles that one
// struct.unpack reads (tonumber on each would run strtod): emission
// interval µs, burst, quota limit, hard 1|0, period end ms, next period
// end ms, seed required 1|0, the length of the current period's q field,
// then the lengths of the first four strings that follow the current
// period's q and f fields: the tenant's key base, the dirty marks'
// prefix, the quota's name, the q and f fields of the next period (only
// rare paths read those), and the floors of the current and of the next
// period's counter (plan.floor, 0 none): a counter below its floor makes
// the reply {4, period}, and the limiter checks it against Postgres; and
// the window's start ms (0 when the window before it is unknown): Redis's
// time before it makes the reply {5}, and the limiter decides on the
// window before (Limiter.earlier), so a snapshot written by a clock that
// runs ahead never resets a quota early. One string instead of one ARGV each: Redis makes
// an object of every ARGV and Lua interns it, a few thousand instructions
// apiece. A 3rd ARGV reads the stored snapshot (KEYS[2]) back, as in
// decideLua. KEYS[1] the state hash. Reply: fastCore's, then the stored
// snapshot when it was asked for. For fastGrantsBody the plan ends with the
// state hash's field of the meter's grants (keyspace.GrantsOf), made once
// in Go: each string a decision makes (its allocation and collection) costs
// Redis about 1,500 instructions, as much as the grants' arithmetic.
var fastBody = fastVariant(false)

// fastGrantsBody is fastBody for a tenant with grants of the quota's meter
// (the near-cache knows it from the grant list it read beside the
// snapshot): the same decision, also reading the state hash's grant list
// in its HMGET and, when the included quota cannot cover the cost,
// drawing from the active grants in order (grant_scan: one pass that sums
// and draws). A
// separate script, so that a tenant without grants runs fastBody as it
// was and pays nothing for them. Its reply is fastBody's, with the quota's
// remaining counting the active grants' remaining.
var fastGrantsBody = fastVariant(true)

// fastVariant assembles fast.lua without or with grants.
func fastVariant(grants bool) string {
	parts := map[string]string{
		"decide_func": decideBody,
		"fast_core":   fastCoreWith("sub(P, R + 1, R + lb)", "sub(P, R + lb + 1, R + lb + ld)", "sub(P, R + lb + ld + 1, R + lb + ld + lm)", grants),
		"grants":      "",
		"grant_name":  "",
		"grant_field": "",
		"grant_flag":  "",
	}
	if grants {
		parts["grants"] = luaFragment("grant_scan")
		parts["grant_name"] = "local gfn = sub(P, R + lb + ld + lm + 2 * lq + 1) -- made in Go: a string made here costs\n"
		parts["grant_field"] = ", gfn"
		// the general decision, for a missing counter, draws them too
		parts["grant_flag"] = "  A[16] = hard + 2\n"
	}
	return luaFill("fast", parts)
}

// grantsLua defines grant_sum and grant_take (lua/grants.lua), for the
// scripts and paths that draw grants.
var grantsLua = luaFragment("grants")

// fastCoreWith returns lua/fast_core.lua, the common plan's decision once the state hash is read
// (hv: x, r, the counter and its flushed mark; usedS the counter, not
// missing), shared by fastBody and fastRefBody: $BASE, $DIRTY and $METER
// stand for the tenant's key base, the dirty marks' prefix and the
// quota's name, which each reads from its own arguments (only the rare
// paths use them). It leaves the reply in r, shorter than decideLua's
// (each element of a reply costs Redis about a thousand instructions):
// {-(1 + allowed + 2 × refusing index + 8 × quota period), retry ms,
// rate remaining, rate reset ms, quota remaining, quota reset ms}. The
// first element is negative, which tells it from decideLua's reply.
//
// With grants, the core reads the meter's grants (hv[5]) and takes from the
// active grants, in order, what the included quota cannot cover: a hard
// quota refuses only when they cannot cover the rest either, with a retry
// at the period's end or when a pending grant takes effect, whichever is
// first; a soft quota goes to overage after them. The quota's remaining
// counts the grants' (the RateLimit header's r).
func fastCoreWith(base, dirty, meter string, grants bool) string {
	core := strings.NewReplacer("$BASE", base, "$DIRTY", dirty, "$METER", meter).Replace(luaFragment("fast_core"))
	parts := map[string]string{
		"count_refusal": countRefusalBody,
		"grant_pre":     "",
		"quota_over":    "used + cost > lim",
		"grant_draw":    "",
		"hset_plain":    "    redis.call('HSET', h, 'r', fmt('%d', ntat), qf, fmt('%d', used + cost))\n",
		"grant_rem_ok":  "",
		"grant_rem_no":  "",
		"quota_refuse":  "  if hard == 1 and used + cost > lim and left > retry then\n    idx, retry = 2, left\n  end\n",
	}
	if grants {
		parts["grant_pre"] = `-- what the included quota cannot cover, and what the grants give of it
local gneed = lim - used
if gneed < 0 then gneed = 0 end
gneed = cost - gneed
if gneed < 0 then gneed = 0 end
local G = hv[5]
local gav, gpend = 0, false
if G then gav, gpend, G = grant_scan(G, now_ms, gneed) end
local gd = gneed
if gd > gav then gd = gav end
`
		parts["quota_over"] = "gneed > gav"
		// drawn in the decision's own HSET (the first branch, about once
		// a day, writes the expiry too and draws apart)
		parts["grant_draw"] = "    if gd > 0 then redis.call('HSET', h, gfn, G) end\n"
		parts["hset_plain"] = `    if gd > 0 then
      redis.call('HSET', h, 'r', fmt('%d', ntat), qf, fmt('%d', used + cost), gfn, G)
    else
      redis.call('HSET', h, 'r', fmt('%d', ntat), qf, fmt('%d', used + cost))
    end
`
		parts["grant_rem_ok"] = "  qrem = qrem + gav - gd\n"
		parts["grant_rem_no"] = "  qrem = qrem + gav\n"
		parts["quota_refuse"] = `  if hard == 1 and gneed > gav then
    -- units return at the period's end, or when a pending grant takes effect
    local gl = left
    if gpend and gpend < gl then gl = gpend end
    if gl < 1 then gl = 1 end
    if gl > retry then idx, retry = 2, gl end
    left = gl
  end
`
	}
	return fillParts("fast_core", core, parts)
}

// fastLua defines decide() and count_refusal only on the paths that call
// them: a closure made on every call is a cost too.
var fastLua = fastBody

var decideLua = luaFill("decide", map[string]string{"decide_func": decideBody})

// seedLua rebuilds a missing period counter from the durable usage the
// UsageLoader read: q = durable + what was counted while it was missing
// (g), with the flushed mark at durable (so the flush moves g next).
//
// It runs only if the hash's epoch is still the one the decision saw
// before the Postgres read: a flush acknowledgement that finds its claim
// lost (Redis lost the hash while the worker held the claim) moves the
// epoch, because its units are in Postgres and a durable figure read
// before its commit lacks them. The seed then answers -1 and the limiter
// reads Postgres again; a counter seeded before such an acknowledgement is
// deleted by it (its growth kept in g) and rebuilt. A claim still in the
// hash (only a counter deleted on its own leaves one) is dropped for the
// same reason: its acknowledgement then finds it lost and has the counter
// rebuilt after its commit. So every committed claim is in the rebuilt
// counter exactly once (TestSeedRacingFlush).
//
// KEYS: state hash. ARGV: counter suffix, durable, expire-at ms, epoch,
// mark, dirty set. Reply: 1 seeded, 0 already there, -1 epoch moved.
var seedLua = luaFragment("seed")

// rebaseLua repairs a counter that a decision found below its floor (what
// this process saw it hold), with the durable usage the UsageLoader read:
// if the counter is below that too, Redis went back (a replica promoted
// after losing its master's last writes: Postgres has the old master's
// flushed units, and more), so the counter becomes the durable usage,
// with nothing unflushed (what it held unflushed was the old master's,
// flushed from there), its claim and flush sequence dropped (its next
// claim is counted as the rebuild's are) and the epoch moved (a flush
// acknowledging a claim made before the rebase then has it rebuilt from
// Postgres once more). Otherwise it was a refund: nothing is written.
//
// KEYS: state hash. ARGV: counter suffix, durable, floor. Reply: 1
// rebased, 0 left.
var rebaseLua = luaFragment("rebase")

var (
	rebaseScript     = redis.NewScript(rebaseLua)
	decideScript     = redis.NewScript(decideLua)
	fastScript       = redis.NewScript(fastLua)
	fastGrantsScript = redis.NewScript(fastGrantsBody)
	refScript        = redis.NewScript(refLua)
	fastRefScript    = redis.NewScript(fastRefBody)
	putLimScript     = redis.NewScript(putLimLua)
	seedScript       = redis.NewScript(seedLua)
)

// toInt64 reads an integer reply element without panicking on a surprise.
func toInt64(v any) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	default:
		return 0, fmt.Errorf("limiter: unexpected script reply element %T", v)
	}
}

// refLua decides by reference: for a tenant missing from the near-cache,
// the script reads the limits it needs from the tenant's limits hash
// (keyNames.limits, written by the limiter whenever it reads a snapshot)
// and builds the decision's keys and arguments itself, so that the
// decision is still one round trip. The limits hash is deleted by the
// server when it writes or deletes the snapshot.
//
// KEYS[1] limits hash. ARGV: 1-3 as decideLua's, 4 the tenant's key base
// ("<p>:{t:<tenant>}:"), 5 lease id, 6 seed required, 7 meter, 8 dirty
// marks' prefix, 9 skip quota (0|1), 10 concurrency slot wanted (0|1),
// 11 lease TTL ms, and optionally 12 a version and 13 a time (ms): the
// hash's "at" becomes that time if it still holds that version (the
// Loader confirmed it; see recheckInBackground).
//
// Reply: {3} when there is no limits hash; else decideLua's reply followed
// by the hash's v, pl, r, c, q:<meter>, at fields (false when missing).
//
// Hash fields: v version, pl plan, at written (ms), r "<emission interval
// µs> <burst> <per second>", c concurrency, q:<meter> "<limit> <hard 1|0>
// <end ms> <next end ms> <start unix> <end unix> <mode>".
var refLua = luaFill("ref", map[string]string{"decide_func": decideBody, "ref_general": refGeneral})

// refGeneral is refLua's decision once the limits hash's fields are read
// (h: v, pl, r, c, q:<meter>, at), shared with fastRefBody's rare paths.
// decide() must be defined.
var refGeneral = luaFill("ref_general", map[string]string{"confirm": confirmLua("ARGV[12]", "ARGV[13]")})

// confirmLua writes a Loader's confirmation into the limits hash (KEYS[1],
// read into h): its "at" becomes the time at if it still holds version
// (see recheckInBackground). version and at name the ARGV that carry them.
func confirmLua(version, at string) string {
	return strings.NewReplacer("$VERSION", version, "$AT", at).Replace(luaFragment("confirm"))
}

// fastRefBody is refLua for the common request by reference (a token
// bucket and the request's quota, at cost: no peek, no concurrency slot,
// the quota not skipped): the limiter writes the limits hash with a field
// fq:<meter> holding what fastBody gets as arguments (limitsFields), so
// that a tenant missing from the near-cache costs Redis about what a
// cached one does, not the general decision's table and string work. A
// hash without that field (written by an older limiter, or a plan with no
// rate) and a missing counter go the general way (refGeneral).
//
// KEYS[1] limits hash, KEYS[2] state hash. ARGV (only what the common
// request needs; the rare paths make refLua's from them): 1 cost, 2 the
// meter, 3 seed required (0|1), 4 the dirty marks' prefix, and optionally
// 5 a version and 6 a time (ms), as refLua's 12 and 13; the tenant's key
// base is KEYS[2] less "st" (an ARGV costs Redis more than the rare paths'
// string.sub). fq:<meter>:
// little-endian doubles emission interval µs, burst, limit, hard 1|0,
// period end ms, next period end ms, the lengths of the current and of
// the next period's q field, then the q and f fields of the current
// period and of the next. Reply: {3} without a limits hash; else
// fastCore's reply (or, on the rare paths, decideLua's) followed by the
// hash's v, pl, r, c, q:<meter>, at fields, as refLua's.
var fastRefBody = luaFill("fast_ref", map[string]string{
	"confirm":     confirmLua("ARGV[5]", "ARGV[6]"),
	"decide_func": decideBody,
	"ref_general": refGeneral,
	"fast_core":   fastCoreWith("sub(KEYS[2], 1, -3)", "ARGV[4]", "ARGV[2]", false),
})

// putLimLua writes a tenant's limits hash unless a newer version is
// stored, or a snapshot of another version is (the server wrote it
// meanwhile, and deleted the hash: a late write must not bring the old
// limits back). KEYS[1] limits hash, KEYS[2] snapshot, KEYS[3] state hash (a tenant with grants gets no limits hash); ARGV: version,
// TTL s, then field, value...
var putLimLua = luaFragment("put_limits")
