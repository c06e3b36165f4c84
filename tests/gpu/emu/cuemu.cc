/* cuemu.cc - the CPU side of cuemu.h: fibers for CUDA threads, barriers,
 * shuffles, and the part of the CUDA runtime API the kernels and their tests
 * call. Blocks run one after another on the calling thread; streams run
 * their work when it is submitted, or with CUEMU_STREAMS=lazy as late as the
 * runtime allows (below). See cuemu.h for what this can and cannot find. */
#include "cuemu.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace cuemu {

Thread *cur;
dim3 block_idx, block_dim, grid_dim;

[[noreturn]] static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cuemu: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    abort();
}

/* ---- fibers: a minimal x86-64 context switch of the callee-saved
 * registers; a switch costs nanoseconds, not the sigprocmask system call of
 * swapcontext. The SSE and x87 control words are not switched: nothing here
 * changes rounding modes. */
extern "C" void cuemu_switch(void **save_sp, void *to_sp);
asm(R"(
    .text
    .globl cuemu_switch
    .type cuemu_switch, @function
cuemu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size cuemu_switch, .-cuemu_switch
)");

enum { STACK_BYTES = 256 << 10, MAX_THREADS = 1024, WARP = 32 };

struct Fiber {
    Thread th;
    void *sp;
    char *stack;        /* STACK_BYTES above a guard page */
    bool done;
};

static struct {
    std::vector<Fiber> fibers;
    void *sched_sp;
    const std::function<void()> *body;
    const char *kernel;
    unsigned live;
    unsigned block_arrived, block_gen;
    unsigned warp_live[MAX_THREADS / WARP], warp_arrived[MAX_THREADS / WARP],
        warp_gen[MAX_THREADS / WARP];
    uint64_t slot[2][MAX_THREADS];   /* shuffles alternate between the two */
    unsigned shfl_seq[MAX_THREADS];
    uint32_t mma_slot[2][MAX_THREADS][6];   /* a[4], b[2]; alternate as the shuffles */
    unsigned mma_seq[MAX_THREADS];
    bool pdl;                       /* this grid is a PDL launch */
    bool pdl_waited[MAX_THREADS];
    bool progress;
    /* each thread's cp.async copies: committed groups, oldest first, and
     * the group still open */
    struct Copy {
        void *dst;          /* nullptr: landed at issue (cp_early) */
        const void *src;
        unsigned n;
    };
    std::deque<std::vector<Copy>> cp_groups[MAX_THREADS];
    std::vector<Copy> cp_open[MAX_THREADS];
} S;

static void yield_to_scheduler(Fiber *f)
{
    cuemu_switch(&f->sp, S.sched_sp);
}

static Fiber *cur_fiber() { return &S.fibers[cur->linear]; }

[[noreturn]] static void fiber_main()
{
    Fiber *f = cur_fiber();
    (*S.body)();
    bool pending = !S.cp_open[f->th.linear].empty();
    for (const auto &g : S.cp_groups[f->th.linear])
        pending |= !g.empty();
    if (pending)
        die("%s: thread %u of block (%u,%u,%u) ended with cp.async copies it never waited for",
            S.kernel, f->th.linear, block_idx.x, block_idx.y, block_idx.z);
    if (S.pdl && !S.pdl_waited[f->th.linear])
        die("%s: launched with programmatic dependent launch, but thread %u ended without "
            "l8k_pdl_wait() (it must wait before it touches what the kernel before wrote)",
            S.kernel, f->th.linear);
    f->done = true;
    S.progress = true;
    /* An exited thread no longer holds back the barriers of the others. */
    S.live--;
    S.warp_live[f->th.warp]--;
    if (S.block_arrived && S.block_arrived == S.live) {
        S.block_arrived = 0;
        S.block_gen++;
    }
    if (S.warp_arrived[f->th.warp] && S.warp_arrived[f->th.warp] == S.warp_live[f->th.warp]) {
        S.warp_arrived[f->th.warp] = 0;
        S.warp_gen[f->th.warp]++;
    }
    cuemu_switch(&f->sp, S.sched_sp);
    die("a finished fiber was resumed");
}

static void fiber_reset(Fiber *f)
{
    /* The stack as cuemu_switch leaves it: six registers, the return address
     * (fiber_main), and a slot so that fiber_main starts with the stack
     * aligned as after a call. */
    uint64_t *top = (uint64_t *)(f->stack + STACK_BYTES);
    *--top = 0;
    *--top = (uint64_t)(uintptr_t)&fiber_main;
    for (int i = 0; i < 6; i++)
        *--top = 0;
    f->sp = top;
    f->done = false;
}

void sync_block()
{
    Fiber *f = cur_fiber();
    unsigned gen = S.block_gen;
    S.progress = true;
    if (++S.block_arrived == S.live) {
        S.block_arrived = 0;
        S.block_gen++;
        return;
    }
    while (S.block_gen == gen)
        yield_to_scheduler(f);
}

void sync_warp()
{
    Fiber *f = cur_fiber();
    unsigned w = f->th.warp, gen = S.warp_gen[w];
    S.progress = true;
    if (++S.warp_arrived[w] == S.warp_live[w]) {
        S.warp_arrived[w] = 0;
        S.warp_gen[w]++;
        return;
    }
    while (S.warp_gen[w] == gen)
        yield_to_scheduler(f);
}

/* One barrier per shuffle: values go to slot[seq & 1], so the next shuffle
 * writes the other half, and the one after that (the same half again) can
 * only start once every lane has passed the next barrier, after its read. */
/* A shuffle reading lane src (same warp): every lane posts its value, one
 * warp barrier, then each reads its source's. */
static uint64_t shfl_from(uint64_t v, unsigned src)
{
    Fiber *f = cur_fiber();
    unsigned me = f->th.linear;
    unsigned half = S.shfl_seq[me]++ & 1;
    S.slot[half][me] = v;
    sync_warp();
    unsigned src_linear = f->th.warp * WARP + src;
    /* The source lane took part in this shuffle: it counted it too (and may
     * have gone on to write the next one's half, or to exit after it). */
    if (src_linear >= S.fibers.size() ||
        S.shfl_seq[src_linear] - S.shfl_seq[me] > 1u)
        die("%s: thread %u shuffles from lane %u, which has exited or does not exist "
            "(a full-mask shuffle needs the whole warp)", S.kernel, me, src);
    return S.slot[half][src_linear];
}

static void check_width(unsigned width)
{
    if (width == 0 || width > WARP || (width & (width - 1)))
        die("%s: shuffle width %u", S.kernel, width);
}

uint64_t shfl_xor(uint64_t v, unsigned lane_mask, unsigned width)
{
    check_width(width);
    unsigned lane = cur_fiber()->th.lane, src = lane ^ lane_mask;
    if ((src & ~(width - 1)) != (lane & ~(width - 1)))
        src = lane;   /* outside the lane's segment: its own value, as the hardware */
    return shfl_from(v, src);
}

uint64_t shfl_idx(uint64_t v, unsigned src_lane, unsigned width)
{
    check_width(width);
    unsigned lane = cur_fiber()->th.lane;
    return shfl_from(v, (lane & ~(width - 1)) + src_lane % width);
}

/* The MMA from its definition: every lane posts its fragments, one warp
 * barrier, then each lane computes its four outputs from the others'
 * registers, reading A[r][k] and B[k][c] where the PTX ISA's layouts put
 * them. Products of bf16 are exact in f32; the sum runs in k order. */
void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2])
{
    Fiber *f = cur_fiber();
    const unsigned me = f->th.linear, w = f->th.warp;
    if (S.warp_live[w] != WARP)
        die("%s: thread %u: mma.sync with %u live lanes in its warp (it needs all 32)",
            S.kernel, me, S.warp_live[w]);
    const unsigned half = S.mma_seq[me]++ & 1;
    memcpy(S.mma_slot[half][me], a, 16);
    memcpy(S.mma_slot[half][me] + 4, b, 8);
    sync_warp();
    for (unsigned l = 0; l < WARP; l++)
        if (S.mma_seq[w * WARP + l] - S.mma_seq[me] > 1u)
            die("%s: thread %u: lane %u of its warp did not take part in the mma", S.kernel,
                me, l);
    const uint32_t(*L)[6] = &S.mma_slot[half][w * WARP];
    auto elt = [](uint32_t reg, unsigned k) {
        return __uint_as_float((k & 1 ? reg >> 16 : reg & 0xffffu) << 16);
    };
    const unsigned g = f->th.lane >> 2, t = f->th.lane & 3;
    for (unsigned i = 0; i < 4; i++) {
        const unsigned r = g + (i >= 2 ? 8 : 0), c = 2 * t + (i & 1);
        float acc = d[i];
        for (unsigned k = 0; k < 16; k++) {
            float av = elt(L[(r & 7) * 4 + (k & 7) / 2][(r >= 8) + 2 * (k >= 8)], k);
            float bv = elt(L[c * 4 + (k & 7) / 2][4 + (k >= 8)], k);
            acc += av * bv;
        }
        d[i] = acc;
    }
}

static void cp_land(void *dst, const void *src, unsigned n)
{
    memcpy(dst, src, n);
    memset((char *)dst + n, 0, 16 - n);
}

/* CUEMU_CP_ASYNC=early: copies land as they are issued, the other end of
 * what the device allows. Lazy landing shows a read before the wait; early
 * landing shows a copy issued over shared memory that other threads have
 * yet to read (a barrier missing before the fetch). */
static bool cp_early()
{
    static int early = -1;
    if (early < 0) {
        const char *m = getenv("CUEMU_CP_ASYNC");
        early = m && !strcmp(m, "early");
    }
    return early;
}

void cp_async16(void *dst, const void *src, unsigned n)
{
    if (n > 16 || ((uintptr_t)dst & 15) || ((uintptr_t)src & 15))
        die("%s: cp.async of %u bytes, %p -> %p: at most 16, both 16-byte aligned", S.kernel, n,
            src, dst);
    if (cp_early()) {
        cp_land(dst, src, n);
        dst = nullptr;   /* landed; still owed a wait */
    }
    S.cp_open[cur_fiber()->th.linear].push_back({ dst, src, n });
}

void cp_async_commit()
{
    unsigned me = cur_fiber()->th.linear;
    S.cp_groups[me].push_back(std::move(S.cp_open[me]));
    S.cp_open[me].clear();
}

void cp_async_wait(unsigned n)
{
    auto &g = S.cp_groups[cur_fiber()->th.linear];
    while (g.size() > n) {
        for (const auto &c : g.front())
            if (c.dst)
                cp_land(c.dst, c.src, c.n);
        g.pop_front();
    }
}

static void pdl_check_release();

void pdl_wait()
{
    S.pdl_waited[cur_fiber()->th.linear] = true;
    pdl_check_release();
}

static cudaError_t g_last_error = cudaSuccess;

bool check_launch(const Cfg &c, const char *name)
{
    uint64_t nthreads = (uint64_t)c.block.x * c.block.y * c.block.z;
    if (nthreads == 0 || nthreads > MAX_THREADS || c.block.z > 64 || c.grid.x == 0 ||
        c.grid.y == 0 || c.grid.z == 0 || c.grid.x > 0x7fffffffu || c.grid.y > 65535 ||
        c.grid.z > 65535) {
        if (getenv("CUEMU_VERBOSE"))
            fprintf(stderr, "cuemu: %s: launch refused: grid %ux%ux%u block %ux%ux%u\n", name,
                    c.grid.x, c.grid.y, c.grid.z, c.block.x, c.block.y, c.block.z);
        g_last_error = cudaErrorInvalidConfiguration;
        return false;
    }
    if (c.smem > 0)
        die("%s: dynamic shared memory is not emulated", name);
    return true;
}

static bool pdl_track_begin(const Cfg &c, const char *name);
static void pdl_track_end(const Cfg &c);
static void pdl_check_apply();

void run_grid(const Cfg &c, const char *name, const std::function<void()> &body)
{
    unsigned nthreads = c.block.x * c.block.y * c.block.z;
    static char *stacks;
    if (!stacks) {
        size_t per = STACK_BYTES + 4096;
        stacks = (char *)mmap(NULL, per * MAX_THREADS, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (stacks == MAP_FAILED)
            die("no memory for fiber stacks");
        for (unsigned i = 0; i < MAX_THREADS; i++)
            mprotect(stacks + i * per, 4096, PROT_NONE);   /* stack overflow faults */
    }
    S.fibers.resize(nthreads);
    for (unsigned i = 0; i < nthreads; i++) {
        Fiber &f = S.fibers[i];
        f.stack = stacks + (size_t)i * (STACK_BYTES + 4096) + 4096;
        f.th.linear = i;
        f.th.tid = dim3(i % c.block.x, i / c.block.x % c.block.y, i / (c.block.x * c.block.y));
        f.th.lane = i % WARP;
        f.th.warp = i / WARP;
    }
    /* Threads run until they wait at a barrier, in thread order or (CUEMU_ORDER=
     * reverse) the other way round: a missing barrier shows as a read of the
     * previous block's values, and the two orders expose different ones.
     * Blocks too: reversed, the last block runs first, so a kernel that
     * reads what another block of the same launch writes (the GPU gives no
     * order between them) sees it unwritten in one of the two runs. */
    static int reverse = -1;
    if (reverse < 0) {
        const char *o = getenv("CUEMU_ORDER");
        reverse = o && !strcmp(o, "reverse");
    }
    S.body = &body;
    S.kernel = name;
    S.pdl = c.pdl;
    grid_dim = c.grid;
    block_dim = c.block;
    const bool check = pdl_track_begin(c, name);
    const unsigned last_block = c.grid.x * c.grid.y * c.grid.z - 1;
    for (unsigned k = 0; k <= last_block; k++) {
        const unsigned b = reverse ? last_block - k : k;
        const unsigned bx = b % c.grid.x, by = b / c.grid.x % c.grid.y,
                       bz = b / (c.grid.x * c.grid.y);
        block_idx = dim3(bx, by, bz);
        S.live = nthreads;
        S.block_arrived = 0;
        for (unsigned w = 0; w < (nthreads + WARP - 1) / WARP; w++) {
            S.warp_live[w] = nthreads - w * WARP < (unsigned)WARP ? nthreads - w * WARP : (unsigned)WARP;
            S.warp_arrived[w] = 0;
        }
        for (auto &f : S.fibers)
            fiber_reset(&f);
        memset(S.shfl_seq, 0, sizeof S.shfl_seq);
        memset(S.mma_seq, 0, sizeof S.mma_seq);
        memset(S.pdl_waited, 0, sizeof S.pdl_waited);
        for (unsigned i = 0; i < nthreads; i++) {
            S.cp_groups[i].clear();
            S.cp_open[i].clear();
        }
        /* Round robin until every thread has returned; a pass in which
         * no thread moves is a deadlock (a barrier some never reach). */
        const bool check_block = check && (b == 0 || b == last_block);
        while (S.live) {
            S.progress = false;
            for (unsigned i = 0; i < nthreads; i++) {
                Fiber &f = S.fibers[reverse ? nthreads - 1 - i : i];
                if (f.done)
                    continue;
                cur = &f.th;
                if (check_block && !S.pdl_waited[f.th.linear])
                    pdl_check_apply();
                cuemu_switch(&S.sched_sp, f.sp);
                pdl_check_release();
            }
            if (!S.progress && S.live) {
                for (auto &f : S.fibers)
                    if (!f.done)
                        fprintf(stderr, "  thread %u (warp %u) waits at a barrier\n",
                                f.th.linear, f.th.warp);
                die("%s: block (%u,%u,%u): deadlock, %u threads wait at barriers that "
                    "the others never reach", name, bx, by, bz, S.live);
            }
        }
    }
    cur = nullptr;
    pdl_track_end(c);
}

/* ---- device memory: each allocation ends at a PROT_NONE page, so reading or
 * writing past its end faults at the instruction that does it. */
struct Alloc {
    char *map;
    size_t map_len, bytes;
    uint8_t acc, prev;   /* PDL check: ACC_* of the running kernel, and of the one before */
};
static std::map<uintptr_t, Alloc> g_allocs;   /* keyed by the pointer handed out */

static const Alloc *find_alloc(const void *p, uintptr_t *base)
{
    uintptr_t a = (uintptr_t)p;
    auto it = g_allocs.upper_bound(a);
    if (it == g_allocs.begin())
        return nullptr;
    --it;
    if (a > it->first + it->second.bytes)   /* one past the end is still "in" it */
        return nullptr;
    *base = it->first;
    return &it->second;
}

bool device_range(const void *p, size_t bytes)
{
    uintptr_t base;
    const Alloc *a = find_alloc(p, &base);
    return a && (uintptr_t)p - base + bytes <= a->bytes;
}

void check_device_ptr(const char *kernel, int arg, const void *p)
{
    if (p && !device_range(p, 0))
        die("%s: argument %d (%p) is not device memory", kernel, arg, p);
}

/* ---- the PDL contract, checked. On the GPU a kernel launched with
 * programmatic dependent launch may start while the kernel before it on
 * the stream still runs; until l8k_pdl_wait() it must not read what that
 * kernel writes, nor write what it reads or writes. Here blocks run in
 * order, so such a race gives the right answer; instead, every kernel's
 * accesses are recorded (all device memory is protected when it starts,
 * and the first read and the first write of each allocation fault once),
 * and in the first and the last block of a PDL launch that directly
 * follows another kernel, each thread runs until its l8k_pdl_wait() with
 * what the kernel before wrote unreadable and what it read read-only: an
 * access there is reported with both kernels' names. Any other work on
 * the stream between the two (a copy, an event, a synchronization, a
 * graph launch) lets the kernel before finish first, and clears it.
 * Protecting all device memory costs system calls at every launch, so only
 * the first PDL_TRACKED launches of each kernel in each configuration (its
 * launch site, grid and block) are recorded, and a launch is checked when
 * the kernel before it was: a pair that repeats (a layer, a step) is
 * checked in its first instances. CUEMU_PDL_CHECK=0 turns this off. */
enum { ACC_READ = 1, ACC_WRITE = 2, PDL_TRACKED = 3 };
static bool g_in_grid;            /* a grid is running: faults are recordings */
static bool g_checking;           /* the running thread is under the check */
static bool g_last_op_kernel;     /* the stream's last operation was a kernel */
static bool g_prev_is_kernel;     /* ... as seen by the operation now running */
static bool g_last_tracked;       /* ... and its accesses were recorded */
static cudaStream_t g_last_stream;
static const char *g_prev_name = "", *g_cur_name = "";

static int prot_of(uint8_t acc)
{
    return acc & ACC_WRITE ? PROT_READ | PROT_WRITE : acc & ACC_READ ? PROT_READ : PROT_NONE;
}

/* What the check allows while the kernel before may still run. */
static int check_prot(uint8_t prev)
{
    return prev & ACC_WRITE ? PROT_NONE : prev & ACC_READ ? PROT_READ : PROT_READ | PROT_WRITE;
}

static void protect(const Alloc &a, int prot)
{
    if (mprotect(a.map, a.map_len - 4096, prot))
        die("mprotect: %s", strerror(errno));
}

/* The allocation whose mapping (guard page excluded) holds p: its own
 * entry, or the next one's when p lies before that one's first byte. */
static Alloc *find_mapping(const void *p, uintptr_t *base)
{
    const char *c = (const char *)p;
    auto it = g_allocs.upper_bound((uintptr_t)p);
    for (int i = 0; i < 2; i++) {
        if (it != g_allocs.end() && c >= it->second.map &&
            c < it->second.map + it->second.map_len - 4096) {
            *base = it->first;
            return &it->second;
        }
        if (it == g_allocs.begin())
            break;
        --it;
    }
    return nullptr;
}

static void on_fault(int sig, siginfo_t *si, void *ucv)
{
    uintptr_t base = 0;
    Alloc *a = g_in_grid ? find_mapping(si->si_addr, &base) : nullptr;
    if (!a) {
        signal(sig, SIG_DFL);   /* a real fault (a guard page): the default crash */
        return;
    }
    const bool write = ((ucontext_t *)ucv)->uc_mcontext.gregs[REG_ERR] & 2;
    if (g_checking && ((a->prev & ACC_WRITE) || (write && a->prev)))
        die("%s: thread %u of block (%u,%u,%u) %s %p, in the %zu bytes at %#lx that %s, the "
            "kernel before it on the stream, %s, before its l8k_pdl_wait(): with programmatic "
            "dependent launch the two may run at once",
            g_cur_name, cur ? cur->linear : 0, block_idx.x, block_idx.y, block_idx.z,
            write ? "wrote" : "read", si->si_addr, a->bytes, (unsigned long)base, g_prev_name,
            a->prev & ACC_WRITE ? "writes" : "reads");
    a->acc |= write ? ACC_READ | ACC_WRITE : ACC_READ;
    protect(*a, prot_of(a->acc) & (g_checking ? check_prot(a->prev) : ~0));
}

static bool pdl_track_enabled()
{
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("CUEMU_PDL_CHECK");
        on = !(e && !strcmp(e, "0"));
        struct sigaction sa = {};
        sa.sa_sigaction = on_fault;
        sa.sa_flags = SA_SIGINFO | SA_NODEFER;
        if (on && sigaction(SIGSEGV, &sa, nullptr))
            die("sigaction: %s", strerror(errno));
    }
    return on;
}

/* Whether this launch is among the first PDL_TRACKED of its configuration. */
static bool pdl_sampled(const Cfg &c, const char *name)
{
    static std::map<std::tuple<const char *, unsigned, unsigned, unsigned, unsigned, unsigned,
                               unsigned>, unsigned> seen;
    unsigned &n = seen[std::make_tuple(name, c.grid.x, c.grid.y, c.grid.z, c.block.x, c.block.y,
                                       c.block.z)];
    return n++ < PDL_TRACKED;
}

/* Before a grid: protect everything when it is recorded; returns whether
 * its PDL threads are checked against the kernel before. */
static bool pdl_track_begin(const Cfg &c, const char *name)
{
    g_in_grid = pdl_track_enabled() && pdl_sampled(c, name);
    if (!g_in_grid)
        return false;
    const bool check = c.pdl && g_prev_is_kernel && g_last_tracked && c.stream == g_last_stream;
    for (auto &e : g_allocs) {
        if (!check)
            e.second.prev = 0;
        e.second.acc = 0;
        protect(e.second, PROT_NONE);
    }
    g_cur_name = name;
    return check;
}

static void pdl_track_end(const Cfg &c)
{
    g_last_op_kernel = true;
    g_last_stream = c.stream;
    g_last_tracked = g_in_grid;
    if (!g_in_grid)
        return;
    g_in_grid = false;
    for (auto &e : g_allocs) {
        e.second.prev = e.second.acc;
        protect(e.second, PROT_READ | PROT_WRITE);
    }
    g_prev_name = g_cur_name;
}

static void pdl_check_apply()
{
    for (auto &e : g_allocs)
        if (e.second.prev)
            protect(e.second, prot_of(e.second.acc) & check_prot(e.second.prev));
    g_checking = true;
}

static void pdl_check_release()
{
    if (!g_checking)
        return;
    g_checking = false;
    for (auto &e : g_allocs)
        if (e.second.prev)
            protect(e.second, prot_of(e.second.acc));
}

/* Work that is not a kernel, or a host synchronization: the kernel before
 * has finished by the next launch. */
static void no_overlap()
{
    g_last_op_kernel = false;
    g_prev_is_kernel = false;
}

/* ---- streams and graphs. By default a stream is synchronous: its work runs
 * when it is submitted. With CUEMU_STREAMS=lazy it runs as late as the
 * runtime allows: when the host synchronizes with it (the stream, an event
 * recorded on it, the device; a cudaFree; a cudaMemcpy), or when the legacy
 * default stream and a blocking stream must wait for each other. A copy
 * from pinned memory then reads it, and a copy to pinned memory fills it
 * (poisoned from the call until then), at that time, so a host that reuses
 * a staging buffer or reads a result before it waits for the copy gets the
 * wrong bytes here, as it could on a GPU. Copies to and from pageable
 * memory keep the runtime's documented behaviour (the source is staged at
 * the call; a copy to it returns once done). Either way, on a stream being
 * captured the work is recorded into the graph (and runs at each
 * cudaGraphLaunch), and what the real runtime refuses during a capture
 * (cudaMalloc, synchronous copies, synchronizing the captured stream) is
 * refused here and invalidates the capture. */
struct Graph {
    std::vector<std::function<void()>> ops;
};
static cudaStream_t g_capturing;
static Graph *g_capture;
static bool g_capture_broken;

struct Stream {
    bool blocking;   /* waits for, and is waited for by, the legacy default stream */
    std::deque<std::pair<uint64_t, std::function<void()>>> q;   /* lazy: not yet run */
};
static Stream g_legacy = { true, {} };
/* Live streams. A destroyed one is emptied, not freed: events recorded on
 * it may still name it. */
static std::vector<Stream *> g_streams;
static uint64_t g_seq;                    /* numbers the submitted work */
static std::recursive_mutex g_stream_mu;  /* the upload's threads copy at once */
static std::map<uintptr_t, size_t> g_pinned;

static bool lazy()
{
    static const bool v = [] {   /* once, whichever thread asks first */
        const char *e = getenv("CUEMU_STREAMS");
        return e && !strcmp(e, "lazy");
    }();
    return v;
}

static Stream *stream_of(cudaStream_t st) { return st ? (Stream *)st : &g_legacy; }

/* Runs the work of s numbered up to upto, in order. */
static void flush(Stream *s, uint64_t upto = UINT64_MAX)
{
    std::lock_guard<std::recursive_mutex> lk(g_stream_mu);
    while (!s->q.empty() && s->q.front().first <= upto) {
        std::function<void()> op = std::move(s->q.front().second);
        s->q.pop_front();
        op();
    }
}

static void flush_blocking()
{
    std::lock_guard<std::recursive_mutex> lk(g_stream_mu);
    for (Stream *s : g_streams)
        if (s->blocking)
            flush(s);
}

/* The legacy default stream and every blocking stream. */
static void flush_legacy()
{
    flush(&g_legacy);
    flush_blocking();
}

static void flush_all()
{
    std::lock_guard<std::recursive_mutex> lk(g_stream_mu);
    flush(&g_legacy);
    for (Stream *s : g_streams)
        flush(s);
}

static bool pinned(const void *p, size_t n)
{
    std::lock_guard<std::recursive_mutex> lk(g_stream_mu);
    auto it = g_pinned.upper_bound((uintptr_t)p);
    if (it == g_pinned.begin())
        return false;
    --it;
    return (uintptr_t)p + n <= it->first + it->second;
}

static bool capture_refuses(const char *what)
{
    if (!g_capture)
        return false;
    fprintf(stderr, "cuemu: %s during a stream capture (the capture is invalidated)\n", what);
    g_capture_broken = true;
    g_last_error = cudaErrorStreamCaptureUnsupported;
    return true;
}

/* Submits op; returns its number on its stream (0: it ran or was captured). */
static uint64_t submit_op(cudaStream_t st, std::function<void()> op)
{
    /* Whether the operation before this one was a kernel (the PDL check). */
    std::function<void()> w = [op = std::move(op)]() {
        g_prev_is_kernel = g_last_op_kernel;
        g_last_op_kernel = false;
        op();
    };
    if (g_capture && st == g_capturing) {
        g_capture->ops.push_back(std::move(w));
        return 0;
    }
    if (g_capture && st == 0 && capture_refuses("work on the legacy default stream"))
        return 0;
    if (!lazy()) {
        w();
        return 0;
    }
    std::lock_guard<std::recursive_mutex> lk(g_stream_mu);
    Stream *s = stream_of(st);
    if (s == &g_legacy)
        flush_blocking();
    else if (s->blocking)
        flush(&g_legacy);
    s->q.emplace_back(++g_seq, std::move(w));
    return g_seq;
}

void submit(cudaStream_t st, std::function<void()> op) { submit_op(st, std::move(op)); }

int sm()
{
    static int v;
    if (!v) {
        const char *e = getenv("CUEMU_SM");
        v = e && (atoi(e) == 80 || atoi(e) == 89) ? atoi(e) : 90;
    }
    return v;
}

}  // namespace cuemu

using namespace cuemu;

extern "C" {

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    if (capture_refuses("cudaMalloc"))
        return cudaErrorStreamCaptureUnsupported;
    size_t page = 4096, need = (bytes + 15) & ~(size_t)15;
    size_t len = ((need + page - 1) & ~(page - 1)) + page;
    char *m = (char *)mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return g_last_error = cudaErrorMemoryAllocation;
    mprotect(m + len - page, page, PROT_NONE);
    char *user = m + len - page - need;
    memset(user, 0xa5, need);   /* cudaMalloc gives garbage, not zeros */
    g_allocs[(uintptr_t)user] = Alloc { m, len, bytes, 0, 0 };
    *p = user;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    if (capture_refuses("cudaFree"))
        return cudaErrorStreamCaptureUnsupported;
    if (!p)
        return cudaSuccess;
    flush_all();   /* the runtime's cudaFree waits for the device */
    auto it = g_allocs.find((uintptr_t)p);
    if (it == g_allocs.end())
        return g_last_error = cudaErrorInvalidValue;
    /* Kept reserved and inaccessible, never handed out again: a kernel or
     * a captured graph still using the memory faults here, where on a GPU
     * it would read or overwrite whatever was allocated there next. */
    if (mmap(it->second.map, it->second.map_len, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) == MAP_FAILED)
        munmap(it->second.map, it->second.map_len);
    g_allocs.erase(it);
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    *p = malloc(bytes ? bytes : 1);
    if (!*p)
        return cudaErrorMemoryAllocation;
    std::lock_guard<std::recursive_mutex> lk(g_stream_mu);
    g_pinned[(uintptr_t)*p] = bytes;
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p)
{
    flush_all();
    {
        std::lock_guard<std::recursive_mutex> lk(g_stream_mu);
        g_pinned.erase((uintptr_t)p);
    }
    free(p);
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned int)
{
    return cudaMallocHost(p, bytes);
}

/* The direction must match the pointers, as with the real runtime's checks
 * on pageable memory: a device pointer where host memory belongs is a bug. */
static cudaError_t check_copy(void *dst, const void *src, cudaMemcpyKind kind)
{
    bool dd = device_range(dst, 0), sd = device_range(src, 0);
    bool ok = kind == cudaMemcpyDefault ||
              (kind == cudaMemcpyHostToDevice && dd && !sd) ||
              (kind == cudaMemcpyDeviceToHost && !dd && sd) ||
              (kind == cudaMemcpyDeviceToDevice && dd && sd) ||
              (kind == cudaMemcpyHostToHost && !dd && !sd);
    return ok ? cudaSuccess : (g_last_error = cudaErrorInvalidValue);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind)
{
    if (capture_refuses("cudaMemcpy (synchronous)"))
        return cudaErrorStreamCaptureUnsupported;
    if (cudaError_t e = check_copy(dst, src, kind))
        return e;
    if (lazy())   /* a copy on the legacy default stream, waited for */
        flush_legacy();
    no_overlap();
    if (n)
        memmove(dst, src, n);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind,
                            cudaStream_t st)
{
    if (cudaError_t e = check_copy(dst, src, kind))
        return e;
    if (!n)
        return cudaSuccess;
    const bool to_host = !device_range(dst, 0), from_host = !device_range(src, 0);
    if (!lazy() || (g_capture && st == g_capturing)) {
        submit(st, [=]() { memmove(dst, src, n); });
    } else if (from_host && !pinned(src, n)) {
        /* Pageable: the runtime stages the bytes before it returns. */
        auto staged = std::make_shared<std::vector<char>>((const char *)src, (const char *)src + n);
        submit(st, [=]() { memmove(dst, staged->data(), n); });
    } else if (to_host && !pinned(dst, n)) {
        /* Pageable: returns once the copy is done. */
        flush(stream_of(st), submit_op(st, [=]() { memmove(dst, src, n); }));
    } else {
        if (to_host)
            memset(dst, 0xa5, n);
        submit(st, [=]() { memmove(dst, src, n); });
    }
    return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int v, size_t n)
{
    if (capture_refuses("cudaMemset (synchronous)"))
        return cudaErrorStreamCaptureUnsupported;
    if (n && !device_range(p, 0))
        return g_last_error = cudaErrorInvalidValue;
    if (lazy()) {   /* on device memory, asynchronous on the legacy stream */
        if (n)
            submit(0, [=]() { memset(p, v, n); });
        return cudaSuccess;
    }
    no_overlap();
    memset(p, v, n);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t st)
{
    if (n && !device_range(p, 0))
        return g_last_error = cudaErrorInvalidValue;
    if (n)
        submit(st, [=]() { memset(p, v, n); });
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *st, unsigned int flags)
{
    Stream *s = new Stream { !(flags & cudaStreamNonBlocking), {} };
    std::lock_guard<std::recursive_mutex> lk(g_stream_mu);
    g_streams.push_back(s);
    *st = (cudaStream_t)s;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *st) { return cudaStreamCreateWithFlags(st, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t st)
{
    if (g_capture && st == g_capturing)
        return g_last_error = cudaErrorStreamCaptureUnsupported;
    if (!st)
        return g_last_error = cudaErrorInvalidValue;
    std::lock_guard<std::recursive_mutex> lk(g_stream_mu);
    flush(stream_of(st));   /* the runtime lets its work finish */
    g_streams.erase(std::remove(g_streams.begin(), g_streams.end(), (Stream *)st),
                    g_streams.end());
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t st)
{
    if ((st == g_capturing || st == 0) && capture_refuses("cudaStreamSynchronize"))
        return cudaErrorStreamCaptureUnsupported;
    if (st)
        flush(stream_of(st));
    else
        flush_legacy();
    no_overlap();
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    if (capture_refuses("cudaDeviceSynchronize"))
        return cudaErrorStreamCaptureUnsupported;
    flush_all();
    no_overlap();
    return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t st, cudaStreamCaptureMode)
{
    if (st == 0 || g_capture)
        return g_last_error = cudaErrorStreamCaptureUnsupported;
    g_capture = new Graph;
    g_capturing = st;
    g_capture_broken = false;
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t st, cudaStreamCaptureStatus *status)
{
    *status = g_capture && st == g_capturing ? cudaStreamCaptureStatusActive
                                             : cudaStreamCaptureStatusNone;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t st, cudaGraph_t *graph)
{
    if (!g_capture || st != g_capturing)
        return g_last_error = cudaErrorIllegalState;
    Graph *g = g_capture;
    g_capture = nullptr;
    g_capturing = nullptr;
    if (g_capture_broken) {
        delete g;
        *graph = nullptr;
        return g_last_error = cudaErrorStreamCaptureInvalidated;
    }
    *graph = (cudaGraph_t)g;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long)
{
    if (!graph)
        return g_last_error = cudaErrorInvalidValue;
    *exec = (cudaGraphExec_t) new Graph(*(Graph *)graph);
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t st)
{
    Graph *g = (Graph *)exec;
    if (!g)
        return g_last_error = cudaErrorInvalidValue;
    submit(st, [g]() {
        for (auto &op : g->ops)
            op();
    });
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
    flush_all();   /* launches of it still queued */
    delete (Graph *)exec;
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    delete (Graph *)graph;
    return cudaSuccess;
}

/* An event is the host time at which the stream reached it (its work runs
 * when submitted, or when flushed), so elapsed times are the emulation's,
 * not a GPU's. */
struct Event {
    double t;
    Stream *s;      /* where it was last recorded, as work number seq */
    uint64_t seq;
};

static bool event_pending(const Event *e)
{
    std::lock_guard<std::recursive_mutex> lk(g_stream_mu);
    return e->s && !e->s->q.empty() && e->s->q.front().first <= e->seq;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned int)
{
    *ev = (cudaEvent_t) new Event { 0.0, nullptr, 0 };
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *ev) { return cudaEventCreateWithFlags(ev, 0); }

cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t st)
{
    Event *e = (Event *)ev;
    uint64_t seq = submit_op(st, [e]() {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        e->t = ts.tv_sec + ts.tv_nsec * 1e-9;
    });
    if (seq) {
        std::lock_guard<std::recursive_mutex> lk(g_stream_mu);
        e->s = stream_of(st);
        e->seq = seq;
        /* On an idle stream it is reached at once: what the host does next
         * (a timing's work) comes after it. */
        if (e->s->q.size() == 1)
            flush(e->s, seq);
    }
    return cudaSuccess;
}

/* Not ready the first time it is asked while pending; done by the next. */
cudaError_t cudaEventQuery(cudaEvent_t ev)
{
    Event *e = (Event *)ev;
    if (!event_pending(e))
        return cudaSuccess;
    flush(e->s, e->seq);
    return cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t ev)
{
    if (capture_refuses("cudaEventSynchronize"))
        return cudaErrorStreamCaptureUnsupported;
    Event *e = (Event *)ev;
    if (e->s)
        flush(e->s, e->seq);
    no_overlap();
    return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    if (event_pending((Event *)a) || event_pending((Event *)b))
        return cudaErrorNotReady;
    *ms = (float)((((Event *)b)->t - ((Event *)a)->t) * 1e3);
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t ev)
{
    delete (Event *)ev;
    return cudaSuccess;
}

/* A small device by default (CUEMU_MEM_MB, 4096): what the engine sizes from
 * free memory stays small, and every byte handed out is really mapped. */
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
    const char *e = getenv("CUEMU_MEM_MB");
    size_t total = (size_t)(e ? atol(e) : 4096) << 20, used = 0;
    for (auto &a : g_allocs)
        used += a.second.bytes;
    *total_b = total;
    *free_b = used < total ? total - used : 0;
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = g_last_error;
    g_last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void) { return g_last_error; }

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error (cuemu)";
    case cudaErrorInvalidValue: return "invalid argument (cuemu)";
    case cudaErrorMemoryAllocation: return "out of memory (cuemu)";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument (cuemu)";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing (cuemu)";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture (cuemu)";
    default: return "error (cuemu)";
    }
}

cudaError_t cudaGetDeviceCount(int *n)
{
    *n = 1;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *d)
{
    *d = 0;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidDevice; }

/* An H200's figures, where a kernel sizes its grid by them. */
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int)
{
    switch (a) {
    case cudaDevAttrMultiProcessorCount: *v = 132; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *v = sm() / 10; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *v = sm() % 10; return cudaSuccess;
    case cudaDevAttrMaxThreadsPerBlock: *v = MAX_THREADS; return cudaSuccess;
    case cudaDevAttrWarpSize: *v = WARP; return cudaSuccess;
    default: return g_last_error = cudaErrorInvalidValue;
    }
}

/* The same device, as the properties the engine's keys are made of. */
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d)
{
    if (d != 0)
        return g_last_error = cudaErrorInvalidDevice;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "cuemu (CPU emulation)");
    p->major = sm() / 10;
    p->minor = sm() % 10;
    p->multiProcessorCount = 132;
    size_t free_b, total_b;
    cudaMemGetInfo(&free_b, &total_b);
    p->totalGlobalMem = total_b;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v)
{
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v)
{
    *v = CUDART_VERSION;
    return cudaSuccess;
}

}  // extern "C"
