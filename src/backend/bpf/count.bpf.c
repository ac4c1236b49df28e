// SPDX-License-Identifier: GPL-2.0
//
// cgperf's BPF counting program: charges what the system-wide counters of
// each CPU counted to the cgroup that was running there, and to every
// monitored ancestor of it, so that a cgroup's counts include its
// descendants as in cgroup mode.
//
// Each CPU records the cgroup of the task it switched to (`running`): at
// the next reading there, what the counters counted since is charged to
// that cgroup, and the cgroup running from then on is recorded. Context
// switches and the clock are counted by the program itself, not read from
// perf counters (see FROM_COUNTER). A switch between two tasks of the
// same cgroup charges nothing yet (no counter is read): the counts go on
// accruing for that cgroup. A task that moves into another cgroup while it
// runs is read at the move, on its CPU, where cgroup mode switches its
// events too: by `moved` if it moves itself (`cgroup:cgroup_attach_task`,
// in its context) and by `moved_away` if a task on another CPU moves it
// (at perf's own call there). That reading charges the cgroup recorded
// (the one left) and records the one entered, as a switch does, so a task
// that moves many times between two switches has each stay charged to its
// cgroup. A reading that comes late (the mover preempted between the move
// and its reading) charges the time in between to the cgroup left, never
// the time before to the cgroup entered. To flush the interval in
// progress, cgperf test-runs `flush` on a CPU (BPF_PROG_TEST_RUN with
// BPF_F_TEST_RUN_ON_CPU): the same reading, with no switch.
// Every run has interrupts or preemption off, so on one CPU two runs
// overlap only when one comes from an interrupt (a flush asked from
// another CPU, perf's call at a move) while `moved` or a flush run from
// cgperf's own thread is in progress: that one does nothing and says so
// (`busy`), and cgperf runs its flush again. So each CPU owns its entries
// of `last`, `running`, `chains` and `totals`, and plain additions
// suffice. (A kernel whose tracepoints run preemptible, PREEMPT_RT, does
// not get `moved`: cgperf does not attach it there.)
//
// What each monitored cgroup was charged lives in `totals`, in memory
// cgperf adds as it is needed (see there), never moved: a cgroup counted
// keeps its cells for as long as it is counted.
//
// Counters sit at stable indices (at most MAX_EVENTS per CPU), so that
// cgperf changes the counted groups without reloading the program. Each
// change on a CPU is an epoch there: cgperf describes each counter by the
// epochs it is live in (`desc` of its `last` entry: from its first epoch,
// whose first reading is a baseline, not charged, until the epoch it is no
// longer read in), then bumps the CPU's epoch (`state`). A run that finds
// the epoch moved past the one it last did (`done`) makes the whole change
// at once: counters live before are read and charged (those that go for
// the last time), counters new since get their baseline. So a group
// replaced by another on one CPU counts every moment exactly once. A
// description cgperf writes is one word, for an epoch no run has seen yet:
// no run ever sees half a change.
//
// It reads the cgroup of a task through BTF (CO-RE), so it needs the
// kernel's BTF; helpers need Linux 5.17 (bpf_loop). At a switch the tasks
// come typed (tp_btf), so their cgroups are plain loads.
//
// Rebuilt by build.sh beside it; tests/bpf.rs checks that the committed
// object is what this source compiles to.

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

// Counters per CPU at most: the positions of `counters` and the stride of
// `last`. Each live one is read at every switch between cgroups, which
// bounds how many are worth counting this way long before memory does.
#define MAX_EVENTS 256
// Chunks per counter at most: enough for 2^32 slots.
#define CHUNKS 32
// Monitored ancestors a recorded chain holds at most; a cgroup with more
// is walked at every charge.
#define CACHED_SLOTS 8
// Chains cached per CPU (a power of two), at their cgroup id modulo this.
#define CHAINS 64
// Levels of the cgroup hierarchy walked at most: bpf_loop's own bound.
#define MAX_LEVELS (1 << 23)

// The kernel structures read, as much of them as is used: the loader
// relocates each field to where the running kernel has it.
struct kernfs_node {
	__u64 id;
} __attribute__((preserve_access_index));

struct cgroup {
	struct kernfs_node *kn;
	int level;
	struct cgroup *ancestors[];
} __attribute__((preserve_access_index));

// Linux 5.17 to 6.0 kept the ancestors' ids rather than the ancestors.
struct cgroup___ids {
	int level;
	__u64 ancestor_ids[];
} __attribute__((preserve_access_index));

struct css_set {
	struct cgroup *dfl_cgrp;
} __attribute__((preserve_access_index));

// The scheduler's run time of a task, and that total when it last got a
// CPU (both on the clock the scheduler keeps for tasks).
struct sched_entity {
	__u64 sum_exec_runtime;
	__u64 prev_sum_exec_runtime;
} __attribute__((preserve_access_index));

struct task_struct {
	int pid;
	int tgid;
	struct css_set *cgroups;
	struct sched_entity se;
} __attribute__((preserve_access_index));

// A function another CPU asked this one to run, and its argument.
struct __call_single_data {
	void *info;
} __attribute__((preserve_access_index));

// perf's call of `func(info)` on the CPU task `p` runs on, if it runs
// there.
struct remote_function_call {
	struct task_struct *p;
	void *info;
} __attribute__((preserve_access_index));

struct config {
	__u32 capacity;
	__u32 cpus;
	// Bumped by cgperf after each change of `monitored`: a chain of an
	// older generation is stale.
	__u64 generation;
	// Slots in the first chunk of `totals`, as a shift.
	__u32 chunk0;
	// Counter indices in use are below it (it never goes down).
	__u32 top;
};

struct reading {
	__u64 value;
	__u64 enabled;
	__u64 running;
};

// Where a counter's readings come from (`source` of its `last` entry,
// written by cgperf before the description that makes it live): a perf
// counter in `counters`, or what the program sees itself. cgperf has the
// program count context switches and the clock, exactly, rather than open
// perf counters for them: the kernel's software counter of context
// switches costs every switch, one this program does nothing at included
// (about 5 % of a pipe ping-pong between two tasks of one cgroup), and a
// counter costs a read at every switch between cgroups.
#define FROM_COUNTER 0
// The switches `charge` saw on this CPU (`context-switches`), each counted
// before the reading at it: the switch out of a task is the task's
// cgroup's, as the kernel's counter charges it in cgroup mode.
#define FROM_SWITCHES 1
// The clock, in nanoseconds (`task-clock`, `cpu-clock`): the time from
// one reading to the next is the cgroup's that ran between them.
#define FROM_CLOCK 2

// A counter's description (written by cgperf alone, one word, through
// mmap): the epoch of its CPU it is live from (its first reading there a
// baseline; 0: never), the epoch it is no longer read in (FOREVER: none
// set), and whether it leads its group (only a leader's times enabled and
// running are read: a group's members share them).
#define FROM(d) ((__u32)(d))
#define UNTIL(d) ((__u32)((d) >> 32) & FOREVER)
#define LEADS(d) ((d) >> 63)
#define FOREVER 0x7fffffffu

// Whether a counter described by `d` is read in runs that did `epoch`.
static __always_inline int live_at(__u64 d, __u64 epoch)
{
	return FROM(d) && FROM(d) <= epoch && epoch < UNTIL(d);
}

// A counter: its description and source, its last reading, and what it
// counted since the one before (the program writes these two alone).
struct last {
	__u64 desc;
	__u64 source;
	struct reading seen;
	struct reading delta;
};

// The slots of a cgroup's monitored ancestors (itself included), found at
// the generation `generation`.
struct chain {
	__u64 id;
	// Its `struct cgroup`, to walk it again.
	__u64 cgroup;
	__u64 generation;
	// Slots below; more than CACHED_SLOTS: too many to keep.
	__u32 n;
	__u32 slots[CACHED_SLOTS];
	__u32 unused;
};

// What the runs on a CPU share besides its counters and chains.
struct progress {
	// The epoch the last run there did, and the switches seen there
	// (FROM_SWITCHES).
	__u64 done;
	__u64 switches;
	// A run is in progress there: set by a run at its start, cleared at
	// its end. A run from an interrupt that finds it set does nothing
	// and returns 1 (a flush: cgperf runs it again).
	__u64 busy;
	// The task recorded as running there since the last reading, whose
	// cgroup `running` holds.
	__u64 task;
	// Switches that went unseen there (see `run`): once one has, every
	// switch there takes a reading.
	__u64 unseen;
	// What the charges of the run in progress add (ALL, HEAD or TAIL
	// below) and, where a reading is split, what the task that ran last
	// counted of the program's own counters (FROM_SWITCHES and
	// FROM_CLOCK, at most their deltas; the perf counters' deltas are all
	// its own).
	__u64 part;
	__u64 tail_switches;
	__u64 tail_clock;
};

// Sized by cgperf at load time (the max_entries here are placeholders).

// config[0]: `struct config`.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct config);
} config SEC(".maps");

// Per CPU: its epoch, written by cgperf alone, through mmap, after the
// descriptions of the counters that change in it.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} state SEC(".maps");

// The counters at position e, one per CPU at the CPU's number, in a perf
// event array at counters[e] (the loader sizes it for the possible CPUs),
// which cgperf creates when it first places a counter at e.
struct counter_array {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, MAX_EVENTS);
	__type(key, __u32);
	__array(values, struct counter_array);
} counters SEC(".maps");

// Counter e of CPU c, described and last read, at c * MAX_EVENTS + e;
// cgperf maps it to write the descriptions.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct last);
} last SEC(".maps");

// The monitored cgroups: cgroup id -> slot, in a hash sized by cgperf for
// the cgroups it counts (its size varies: cgperf replaces it by one twice
// as big when it is full, and drops the old one once every CPU has ended
// the runs that may still look it up).
struct ids {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u64);
	__type(value, __u32);
};

// monitored[0]: the hash of monitored cgroups in use.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct ids);
} monitored SEC(".maps");

// The cgroup recorded as running on CPU c (id 0: none yet), at c.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct chain);
} running SEC(".maps");

// The progress of CPU c's runs, at c.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct progress);
} progress SEC(".maps");

// Chains cached by CPU c for cgroup id i at c * CHAINS + i % CHAINS: a
// switch into a cgroup seen lately costs no walk (a read and a hash
// lookup per level) but one array lookup.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct chain);
} chains SEC(".maps");

// A chunk of `totals`: what slots of one chunk were charged for one
// counter, slot by slot, CPU by CPU: at offset * cpus + c for the slot at
// `offset` in the chunk. cgperf creates each chunk (its size varies,
// hence BPF_F_INNER_MAP) and reads it through mmap.
struct chunk {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE | BPF_F_INNER_MAP);
	__type(key, __u32);
	__type(value, struct reading);
};

// What each slot was charged for counter e: chunk k of counter e at
// e * CHUNKS + k. Chunk 0 holds the first 1 << chunk0 slots (`struct
// config`), and each next chunk twice as many as the one before: cgperf adds a chunk when it first counts
// a cgroup in a slot there, and a counter's chunks when it first places a
// counter at e. So the memory follows the cgroups and counters counted,
// and a chunk, once there, stays: nothing is ever moved or handed over.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, MAX_EVENTS * CHUNKS);
	__type(key, __u32);
	__array(values, struct chunk);
} totals SEC(".maps");

// What a run reads besides the perf counters: the switches seen on its
// CPU and the clock, read once, so that every counter the program counts
// itself is read at the same moment.
struct seen {
	__u64 switches;
	__u64 clock;
};

// Reads counter e of this CPU from `source`, the value alone unless
// `times`: false if it cannot be read (none there, yet or any more).
static __always_inline int read_counter(__u32 e, __u64 source, int times, struct seen *seen,
					struct reading *now)
{
	if (source == FROM_SWITCHES || source == FROM_CLOCK) {
		now->value = source == FROM_SWITCHES ? seen->switches : seen->clock;
		now->enabled = times ? seen->clock : 0;
		now->running = now->enabled;
		return 1;
	}
	if (source != FROM_COUNTER)
		return 0;
	void *array = bpf_map_lookup_elem(&counters, &e);
	if (!array)
		return 0;
	if (times) {
		struct bpf_perf_event_value v;
		if (bpf_perf_event_read_value(array, BPF_F_CURRENT_CPU, &v, sizeof(v)))
			return 0;
		now->value = v.counter;
		now->enabled = v.enabled;
		now->running = v.running;
		return 1;
	}
	// An errno, negated, on failure (no count comes near 2^64 - 4095).
	__u64 value = bpf_perf_event_read(array, BPF_F_CURRENT_CPU);
	if (value >= (__u64)-4095)
		return 0;
	now->value = value;
	now->enabled = 0;
	now->running = 0;
	return 1;
}

// The `last` entry of counter e of `cpu`, with no delta yet.
static __always_inline struct last *cleared(__u32 cpu, __u32 e)
{
	__u32 i = cpu * MAX_EVENTS + e;
	struct last *l = bpf_map_lookup_elem(&last, &i);
	if (l) {
		l->delta.value = 0;
		l->delta.enabled = 0;
		l->delta.running = 0;
	}
	return l;
}

// Makes `now` the last reading of `l`, with the delta since the one before
// (none if `baseline`: a fresh counter's first reading).
static __always_inline void advance(struct last *l, struct reading *now, int baseline)
{
	if (!baseline) {
		l->delta.value = now->value - l->seen.value;
		l->delta.enabled = now->enabled - l->seen.enabled;
		l->delta.running = now->running - l->seen.running;
	}
	l->seen = *now;
}

// The loops over a CPU's counters below `top` run as bpf_loop callbacks:
// the verifier checks a callback once, where it walks a bounded loop
// through every possible iteration (MAX_EVENTS), which made loading the
// programs take most of cgperf's start-up. The kernel inlines bpf_loop
// into a plain loop.

struct counters_loop {
	__u32 cpu;
	__u32 top;
	__u64 done;
	__u64 epoch;
	struct seen seen;
};

// Reads counter e as `read_all` says.
static long read_one(__u32 e, struct counters_loop *c)
{
	if (e >= c->top || e >= MAX_EVENTS)
		return 1;
	struct last *l = cleared(c->cpu, e);
	if (!l)
		return 0;
	__u64 d = *(volatile __u64 *)&l->desc;
	int was = live_at(d, c->done);
	if (!was && !live_at(d, c->epoch))
		return 0;
	struct reading now = {};
	if (read_counter(e, l->source, LEADS(d), &c->seen, &now))
		advance(l, &now, !was);
	return 0;
}

// Reads the counters of `cpu` below `top` live in epoch `done` (the one
// the last run did) or `epoch` (this run's) into their `last` entries:
// the delta since the last reading for the first, a baseline for those
// new in `epoch`, none for one that cannot be read. `switches`: the
// switches seen there.
__noinline int read_all(__u32 cpu, __u32 top, __u64 done, __u64 epoch, __u64 switches)
{
	struct counters_loop c = {
		.cpu = cpu,
		.top = top,
		.done = done,
		.epoch = epoch,
		.seen = { .switches = switches, .clock = bpf_ktime_get_ns() },
	};
	bpf_loop(MAX_EVENTS, read_one, &c, 0);
	return 0;
}

// The chunk of `totals` that holds `slot` when the first holds 1 << shift,
// and the slot's offset there.
static __always_inline __u32 chunk_of(__u32 slot, __u32 shift, __u32 *offset)
{
	// Chunk k holds the slots whose q is in [2^k, 2^(k+1)).
	__u32 q = (slot >> shift) + 1, k = 0;
	if (q >> 16) {
		q >>= 16;
		k += 16;
	}
	if (q >> 8) {
		q >>= 8;
		k += 8;
	}
	if (q >> 4) {
		q >>= 4;
		k += 4;
	}
	if (q >> 2) {
		q >>= 2;
		k += 2;
	}
	if (q >> 1)
		k += 1;
	*offset = slot - ((((__u32)1 << k) - 1) << shift);
	return k;
}

// Which part of each delta a charge adds: all of it, or, where a reading
// is split between the cgroup recorded and the one of the task that ran
// last (see `run`), what came before that task ran (HEAD) or the rest
// (TAIL).
#define ALL 0
#define HEAD 1
#define TAIL 2

struct charge_loop {
	__u32 cpu;
	__u32 top;
	// The chunk of the slot charged and the slot's cell there.
	__u32 chunk;
	__u32 cell;
	__u64 part;
	__u64 tail_switches;
	__u64 tail_clock;
};

static __always_inline __u64 at_most(__u64 a, __u64 b)
{
	return a < b ? a : b;
}

// Adds counter e's delta, or the part of it `c` says, to the slot `c`
// names.
static long charge_one(__u32 e, struct charge_loop *c)
{
	if (e >= c->top || e >= MAX_EVENTS)
		return 1;
	__u32 from = c->cpu * MAX_EVENTS + e;
	struct last *l = bpf_map_lookup_elem(&last, &from);
	if (!l || !(l->delta.value | l->delta.enabled | l->delta.running))
		return 0;
	struct reading d = l->delta;
	if (c->part != ALL && l->source != FROM_COUNTER) {
		struct reading tail = {
			.value = at_most(d.value, l->source == FROM_SWITCHES ? c->tail_switches :
									      c->tail_clock),
			.enabled = at_most(d.enabled, c->tail_clock),
			.running = at_most(d.running, c->tail_clock),
		};
		if (c->part == TAIL) {
			d = tail;
		} else {
			d.value -= tail.value;
			d.enabled -= tail.enabled;
			d.running -= tail.running;
		}
	} else if (c->part == HEAD) {
		return 0;
	}
	__u32 at = e * CHUNKS + c->chunk;
	void *chunk = bpf_map_lookup_elem(&totals, &at);
	if (!chunk)
		return 0;
	struct reading *t = bpf_map_lookup_elem(chunk, &c->cell);
	if (!t)
		return 0;
	t->value += d.value;
	t->enabled += d.enabled;
	t->running += d.running;
	return 0;
}

// Adds this CPU's deltas of its counters below `top` (the part of them
// its run in progress says) to `slot`.
__noinline int charge_slot(__u32 cpu, __u32 capacity, __u32 slot, __u32 top)
{
	__u32 zero = 0;
	struct config *cfg = bpf_map_lookup_elem(&config, &zero);
	struct progress *pr = bpf_map_lookup_elem(&progress, &cpu);
	if (!cfg || !pr || slot >= capacity || cfg->chunk0 > 31)
		return 0;
	__u32 offset = 0;
	struct charge_loop c = {
		.cpu = cpu,
		.top = top,
		.part = pr->part,
		.tail_switches = pr->tail_switches,
		.tail_clock = pr->tail_clock,
	};
	c.chunk = chunk_of(slot, cfg->chunk0, &offset);
	c.cell = offset * cfg->cpus + cpu;
	bpf_loop(MAX_EVENTS, charge_one, &c, 0);
	return 0;
}

struct walk {
	struct cgroup *cgroup;
	__u32 level;
	__u32 cpu;
	__u32 capacity;
	// Charge each monitored ancestor as it is found (counters below it).
	__u32 charge;
	__u32 top;
	// Monitored ancestors met so far, the first CACHED_SLOTS of them.
	__u32 n;
	__u32 slots[CACHED_SLOTS];
};

// The id of `cgroup`'s ancestor at `level` (0: the root).
static __always_inline __u64 ancestor_id(struct cgroup *cgroup, __u32 level)
{
	__u64 id = 0;
	if (bpf_core_field_exists(cgroup->ancestors)) {
		struct cgroup *a = 0;
		void *at = (void *)cgroup + bpf_core_field_offset(cgroup->ancestors) +
			   (__u64)level * sizeof(a);
		if (bpf_probe_read_kernel(&a, sizeof(a), at) || !a)
			return 0;
		id = BPF_CORE_READ(a, kn, id);
	} else {
		struct cgroup___ids *old = (void *)cgroup;
		void *at = (void *)old + bpf_core_field_offset(old->ancestor_ids) +
			   (__u64)level * sizeof(id);
		if (bpf_probe_read_kernel(&id, sizeof(id), at))
			return 0;
	}
	return id;
}

// Notes (and charges, if asked) the ancestor at `level` if it is
// monitored; stops past the cgroup itself.
static long walk_level(__u32 level, struct walk *w)
{
	if (level > w->level)
		return 1;
	__u64 id = ancestor_id(w->cgroup, level);
	if (!id)
		return 0;
	__u32 zero = 0;
	void *ids = bpf_map_lookup_elem(&monitored, &zero);
	if (!ids)
		return 1;
	__u32 *slot = bpf_map_lookup_elem(ids, &id);
	if (!slot || *slot >= w->capacity)
		return 0;
	if (w->charge)
		charge_slot(w->cpu, w->capacity, *slot, w->top);
	__u32 n = w->n;
	if (n < CACHED_SLOTS)
		w->slots[n] = *slot;
	if (n <= CACHED_SLOTS)
		w->n = n + 1;
	return 0;
}

// Walks the ancestors of the cgroup recorded as running on `cpu` into its
// chain (charging them the counters below `top` if `charge`).
__noinline int walk_chain(__u32 cpu, __u32 capacity, __u32 charge, __u32 top)
{
	struct chain *c = bpf_map_lookup_elem(&running, &cpu);
	if (!c)
		return 0;
	struct cgroup *cgroup = (struct cgroup *)c->cgroup;
	int level = 0;
	if (bpf_core_field_exists(cgroup->ancestors))
		level = BPF_CORE_READ(cgroup, level);
	else
		level = BPF_CORE_READ((struct cgroup___ids *)cgroup, level);
	struct walk w = {
		.cgroup = cgroup,
		.level = level < 0 ? 0 : level,
		.cpu = cpu,
		.capacity = capacity,
		.charge = charge,
		.top = top,
	};
	bpf_loop(MAX_LEVELS, walk_level, &w, 0);
	c->n = w.n;
	for (__u32 i = 0; i < CACHED_SLOTS; i++)
		c->slots[i] = w.slots[i];
	return 0;
}

// Charges this CPU's deltas of its counters below `top` to every slot of
// the chain recorded as running on `cpu`.
__noinline int charge_chain(__u32 cpu, __u32 capacity, __u32 top)
{
	struct chain *c = bpf_map_lookup_elem(&running, &cpu);
	if (!c)
		return 0;
	if (c->n > CACHED_SLOTS)
		return walk_chain(cpu, capacity, 1, top);
	__u32 n = c->n;
	for (__u32 i = 0; i < CACHED_SLOTS && i < n; i++)
		charge_slot(cpu, capacity, c->slots[i], top);
	return 0;
}

// Makes the chain recorded as running on `cpu` that of the cgroup it
// names (`id`, `cgroup`) at `generation`, from this CPU's cache or by a
// walk.
__noinline int record(__u32 cpu, __u32 capacity, __u64 generation)
{
	struct chain *r = bpf_map_lookup_elem(&running, &cpu);
	if (!r)
		return 0;
	__u64 id = r->id, cgroup = r->cgroup;
	__u32 at = cpu * CHAINS + (__u32)(id & (CHAINS - 1));
	struct chain *c = bpf_map_lookup_elem(&chains, &at);
	if (c && c->id == id && c->cgroup == cgroup && c->generation == generation) {
		*r = *c;
		return 0;
	}
	r->generation = generation;
	walk_chain(cpu, capacity, 0, 0);
	if (c)
		*c = *r;
	return 0;
}

// The default cgroup of `task`, and its id, for a task known only by its
// address (probe reads).
static __always_inline __u64 cgroup_of(struct task_struct *task, __u64 *id)
{
	struct cgroup *cgroup = BPF_CORE_READ(task, cgroups, dfl_cgrp);
	*id = cgroup ? BPF_CORE_READ(cgroup, kn, id) : 0;
	return (__u64)cgroup;
}

// The same for a task the kernel hands over typed (BTF): plain loads,
// which the verifier guards (a fault reads 0), at a fraction of a probe
// read's cost. A switch reads two tasks' cgroups, four loads each, and
// most switches end there.
static __always_inline __u64 cgroup_of_typed(struct task_struct *task, __u64 *id)
{
	struct cgroup *cgroup = task->cgroups->dfl_cgrp;
	*id = cgroup ? cgroup->kn->id : 0;
	return (__u64)cgroup;
}

// Makes `r` the chain of `cgroup` (id `id`) if it is not already.
static __always_inline void become(struct chain *r, __u64 cgroup, __u64 id, __u32 cpu,
				   __u32 capacity, __u64 generation)
{
	if (r->id == id && r->cgroup == cgroup && r->generation == generation)
		return;
	r->id = id;
	r->cgroup = cgroup;
	record(cpu, capacity, generation);
}

// What started a run.
#define SWITCH 0
// cgperf's flush: always reads (the interval in progress is charged).
#define FLUSH 1
// A move of the task running here.
#define MOVE 2

// Charges what this CPU counted since its last reading to the cgroup
// recorded as running there, then records the task running from now on
// and its cgroup (`next`, `next_cgroup`, `next_id`: at a switch, the task
// switched to; at a flush or a move, the running task). `task`, `cgroup`,
// `id`: the task that ran until now (at a switch, the one switched out)
// and its cgroup, which lets a switch between two tasks of the cgroup
// recorded read nothing. A switch is counted first. Returns 1 if a run
// was in progress here (this one interrupts it): then it did nothing.
//
// If the task that ran until now is not the one recorded, a switch went
// unseen: some kernels switch out of some tasks (those of a VM's own
// agent) without the tracepoint and without running any BPF program, while
// their perf counters count the switch and cgroup mode switches events
// there. The task recorded ran up to that switch, then the task seen now
// (`ran`: how long it ran since it got the CPU, on the scheduler's clock,
// at a switch; ~0 otherwise). The reading is split there: the switches
// seen since the last reading and the unseen one (the kernel counts it as
// the switch out of the task recorded) go to the cgroup recorded, as does
// the clock but for `ran`; the switch out of the task seen now, `ran` and
// what the perf counters counted (which the program cannot split) go to
// its cgroup. At a move the task's cgroup is already the one it enters,
// and what it counted before is the one's it leaves: all of it goes to the
// cgroup recorded. Once a switch went unseen on a CPU, every switch there
// takes a reading (none is skipped as a switch within one cgroup), so
// that what the perf counters counted goes to the cgroup entered from the
// moment the task recorded got the CPU, not from an earlier switch.
static __always_inline int run(__u64 task, __u64 cgroup, __u64 id, __u64 next,
			       __u64 next_cgroup, __u64 next_id, int why, __u64 ran)
{
	__u32 zero = 0;
	struct config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg)
		return 0;
	__u32 cpu = bpf_get_smp_processor_id();
	__u32 capacity = cfg->capacity;
	__u64 generation = cfg->generation;
	if (cpu >= cfg->cpus)
		return 0;
	__u64 *st = bpf_map_lookup_elem(&state, &cpu);
	struct chain *r = bpf_map_lookup_elem(&running, &cpu);
	struct progress *pr = bpf_map_lookup_elem(&progress, &cpu);
	if (!st || !r || !pr)
		return 0;
	// A switch never interrupts a run (both have preemption off, and a
	// switch interrupts off): only a flush or a move from an interrupt
	// can find one in progress.
	if (why != SWITCH && pr->busy)
		return 1;
	pr->busy = 1;
	if (why == SWITCH)
		pr->switches++;
	int unseen = pr->task && pr->task != task;
	if (unseen) {
		pr->unseen++;
		pr->switches++;
	}
	// The epoch first: cgperf raises `top` and describes the counters of
	// an epoch before it moves to it.
	__u64 epoch = *(volatile __u64 *)st;
	asm volatile("" ::: "memory");
	__u32 top = *(volatile __u32 *)&cfg->top;
	__u64 done = pr->done;
	if (why != FLUSH && !pr->unseen && epoch == done && r->generation == generation &&
	    r->id == id && r->cgroup == cgroup && next_id == id && next_cgroup == cgroup) {
		pr->task = next;
		pr->busy = 0;
		return 0;
	}
	read_all(cpu, top, done, epoch, pr->switches);
	// Up to now, for the cgroup recorded as running since the last
	// reading (a task that moved since without a reading taken at its
	// move has it charged to the cgroup it left); for the first reading
	// here, for the cgroup of the task that ran.
	if (!pr->task && id)
		become(r, cgroup, id, cpu, capacity, generation);
	else if (r->id && r->generation != generation)
		record(cpu, capacity, generation);
	int split = unseen && id && why != MOVE;
	if (split) {
		pr->part = HEAD;
		pr->tail_switches = why == SWITCH;
		pr->tail_clock = ran;
	}
	if (r->id)
		charge_chain(cpu, capacity, top);
	if (split) {
		pr->part = TAIL;
		become(r, cgroup, id, cpu, capacity, generation);
		charge_chain(cpu, capacity, top);
		pr->part = ALL;
	}
	pr->done = epoch;
	if (next_id)
		become(r, next_cgroup, next_id, cpu, capacity, generation);
	pr->task = next;
	asm volatile("" ::: "memory");
	pr->busy = 0;
	return 0;
}

// sched_switch(preempt, prev, next, ...), with typed arguments: `prev` is
// the task running, switched out.
SEC("tp_btf/sched_switch")
int charge(__u64 *ctx)
{
	struct task_struct *prev = (struct task_struct *)ctx[1];
	struct task_struct *next = (struct task_struct *)ctx[2];
	__u64 id = 0, next_id = 0;
	__u64 cgroup = cgroup_of_typed(prev, &id);
	__u64 next_cgroup = cgroup_of_typed(next, &next_id);
	__u64 ran = prev->se.sum_exec_runtime - prev->se.prev_sum_exec_runtime;
	return run((__u64)prev, cgroup, id, (__u64)next, next_cgroup, next_id, SWITCH, ran);
}

// A reading for the task running here, `current`, which goes on running
// in its cgroup (`why`: a flush or a move).
static __always_inline int read_for(struct task_struct *current, int why)
{
	__u64 id = 0;
	__u64 cgroup = cgroup_of(current, &id);
	return run((__u64)current, cgroup, id, (__u64)current, cgroup, id, why, ~0ULL);
}

// The flush: test-run by cgperf on a CPU (a typed program cannot be), it
// charges the cgroup recorded as running there what its counters counted
// since the last reading. Returns 1 if it interrupted a run there and did
// nothing (cgperf runs it again).
SEC("raw_tracepoint/sched_switch")
int flush(struct bpf_raw_tracepoint_args *ctx)
{
	return read_for((struct task_struct *)bpf_get_current_task(), FLUSH);
}

// cgroup_attach_task(dst_cgrp, path, task, threadgroup), after the move:
// a reading if the task running here moved itself (or its thread group),
// just after cgroup mode switched its events (perf's call on this CPU,
// made without a csd: `moved_away` does not see it). A task moved by
// another while it runs on another CPU is `moved_away`'s.
SEC("raw_tracepoint/cgroup_attach_task")
int moved(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *task = (struct task_struct *)ctx->args[2];
	struct task_struct *current = (struct task_struct *)bpf_get_current_task();
	if (!task)
		return 0;
	int tgid = BPF_CORE_READ(task, tgid);
	__u64 me = bpf_get_current_pid_tgid();
	if (task != current && !(ctx->args[3] && (__u32)(me >> 32) == (__u32)tgid))
		return 0;
	return read_for(current, MOVE);
}

// csd_function_entry(func, csd): this CPU is about to run `func` for
// another CPU. perf moves the cgroup-mode events of a task that a task on
// another CPU moved this way, if it runs: task_function_call(task,
// __perf_cgroup_move, task) asks the task's CPU to run remote_function
// with a `struct remote_function_call` of the task, which runs
// __perf_cgroup_move(task) if the task is still the one running there.
// The reading is taken then, in the moved task's context, after the move,
// the moment cgroup mode switches too.
// The call is known by its argument alone: the task running here, named
// as both the task and the function's argument, which no other call perf
// makes through remote_function does (the others pass an event or a
// request about one). Knowing it by the functions' addresses would need
// /proc/kallsyms to show them, which it does not to a cgperf without
// CAP_SYSLOG (as the shipped unit and DaemonSet run it). Another
// function's argument that looked the same by chance would take a reading
// with no move, which charges nothing differently.
SEC("tp_btf/csd_function_entry")
int moved_away(__u64 *ctx)
{
	// Typed: a plain load of the csd's argument (the call's own fields,
	// behind an untyped pointer, take a probe read each).
	struct __call_single_data *csd = (struct __call_single_data *)ctx[1];
	if (!csd)
		return 0;
	struct remote_function_call *call = csd->info;
	struct task_struct *current = (struct task_struct *)bpf_get_current_task();
	if (!call || BPF_CORE_READ(call, p) != current || BPF_CORE_READ(call, info) != current)
		return 0;
	return read_for(current, MOVE);
}

char LICENSE[] SEC("license") = "GPL";
