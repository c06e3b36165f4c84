/* test_cuemu.cc - the emulation's checks of two contracts (cuemu.cc).
 * PDL: a kernel launched with programmatic dependent launch that touches,
 * before its l8k_pdl_wait(), what the kernel before it on the stream writes
 * (or writes what that kernel reads) is reported, naming both; what is not
 * the kernel before's (weights), or a kernel after other work on the
 * stream, is not. cp.async: a copy lands at the wait that covers it (read
 * before, its destination still holds what it held), zero-filled past its
 * size, and one never waited for is reported; with CUEMU_CP_ASYNC=early it
 * lands at the issue, so a fetch over shared memory that other threads
 * have yet to read (no barrier before it) gives them the new data. Block
 * order: first to last, and last to first with CUEMU_ORDER=reverse, so a
 * block that reads what another block of its launch writes sees it
 * unwritten in one of the two. Lazy streams (CUEMU_STREAMS=lazy): a copy
 * to pinned memory lands at the synchronization (poisoned before it), a
 * copy from pinned memory reads it then, one from pageable memory at the
 * call; a cudaMemset (the legacy stream) and a non-blocking stream's work
 * are unordered; an event synchronizes the work up to it, no further, and
 * on an idle stream is reached at once. Each case runs in a child process,
 * since a report aborts. */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../test.h"

#define FIRST_LAZY 13

#include "common.cuh"

enum { N = 1024 };

static __global__ void produce(float *a)
{
    l8k_pdl_wait();
    l8k_pdl_allow();
    a[blockIdx.x * blockDim.x + threadIdx.x] = (float)threadIdx.x;
}

/* reads in, writes out, both after the wait */
static __global__ void copy(const float *in, float *out)
{
    l8k_pdl_wait();
    l8k_pdl_allow();
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = in[i];
}

/* w before the wait (what the GEMV does with its weights), a after */
static __global__ void early_weights(const float *a, const float *w, float *b)
{
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    const float wv = w[i];
    l8k_pdl_wait();
    l8k_pdl_allow();
    b[i] = a[i] * wv;
}

/* reads a before the wait: a race with the kernel that writes a */
static __global__ void early_read(const float *a, float *b)
{
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    const float v = a[i];
    l8k_pdl_wait();
    b[i] = v;
}

/* the last thread writes p before the wait: a race with a kernel reading p */
static __global__ void early_write(float *p)
{
    if (threadIdx.x == blockDim.x - 1 && blockIdx.x == gridDim.x - 1)
        p[0] = 0.0f;
    l8k_pdl_wait();
}

/* Each thread stages 16 bytes of a through shared memory by cp.async (odd
 * threads: 0 bytes, so zeros), reading its destination before the wait;
 * then b gets that read and, after the barrier, its neighbour's chunk. */
static __global__ void stage(const float *a, float *b)
{
    __shared__ __align__(16) float sh[4 * 128];
    l8k_pdl_wait();
    const uint32_t i = threadIdx.x;
    for (int k = 0; k < 4; k++)
        sh[4 * i + k] = -1.0f;
    l8k_cp_async16(&sh[4 * i], a + 4 * i, i % 2 ? 0 : 16);
    l8k_cp_async_commit();
    const float before = sh[4 * i];
    l8k_cp_async_wait<0>();
    __syncthreads();
    const uint32_t nb = (i + 1) % 128;
    b[4 * i] = before;
    for (int k = 1; k < 4; k++)
        b[4 * i + k] = sh[4 * nb + k];
}

/* Each thread reads its neighbour's chunk of tile 0, then fetches tile 1
 * over its own chunk; the wait comes after a barrier. Without the fence (a
 * barrier between the reads and the fetches) a thread's fetch may land
 * before its neighbour has read: b gets tile 1 there instead of tile 0. */
static __global__ void refetch(const float *a, float *b, bool fence)
{
    __shared__ __align__(16) float sh[4 * 128];
    l8k_pdl_wait();
    const uint32_t i = threadIdx.x, nb = (i + 1) % 128;
    l8k_cp_async16(&sh[4 * i], a + 4 * i, 16);
    l8k_cp_async_commit();
    l8k_cp_async_wait<0>();
    __syncthreads();
    const float x = sh[4 * nb];
    if (fence)
        __syncthreads();
    l8k_cp_async16(&sh[4 * i], a + 512 + 4 * i, 16);
    l8k_cp_async_commit();
    __syncthreads();
    l8k_cp_async_wait<0>();
    b[i] = x;
}

/* Thread 0 of each block reads the next block's flag, then sets its own:
 * a dependence between blocks that the GPU does not order. */
static __global__ void read_next_block(float *flag, float *seen)
{
    l8k_pdl_wait();
    const uint32_t b = blockIdx.x;
    if (threadIdx.x == 0) {
        seen[b] = b + 1 < gridDim.x ? flag[b + 1] : -1.0f;
        flag[b] = 1.0f;
    }
}

/* a copy issued and never waited for */
static __global__ void unwaited(const float *a)
{
    __shared__ __align__(16) float sh[4];
    l8k_pdl_wait();
    if (threadIdx.x == 5)
        l8k_cp_async16(sh, a, 16);
    l8k_cp_async_commit();
}

static float *dmalloc(void)
{
    float *p = NULL;
    if (cudaMalloc((void **)&p, N * sizeof(float)) != cudaSuccess)
        abort();
    cudaMemset(p, 0, N * sizeof(float));
    return p;
}

#define LAUNCH(k, ...) \
    l8k_launch(#k, k, dim3(N / 128), dim3(128), st, __VA_ARGS__)

/* Case c in this process (aborts on a report). */
static void run_case(int c)
{
    if (c >= FIRST_LAZY)
        setenv("CUEMU_STREAMS", "lazy", 1);
    cudaStream_t st;
    cudaStreamCreate(&st);
    float *a = dmalloc(), *b = dmalloc(), *w = dmalloc();
    cudaEvent_t ev;
    cudaEventCreate(&ev);
    switch (c) {
    case 0:   /* weights early, the produced input after the wait: fine */
        LAUNCH(produce, a);
        LAUNCH(early_weights, (const float *)a, (const float *)w, b);
        break;
    case 1:   /* the produced input early: reported */
        LAUNCH(produce, a);
        LAUNCH(early_read, (const float *)a, b);
        break;
    case 2:   /* writing what the kernel before reads: reported */
        LAUNCH(copy, (const float *)a, b);
        LAUNCH(early_write, a);
        break;
    case 3:   /* a synchronization between them: fine */
        LAUNCH(produce, a);
        cudaStreamSynchronize(st);
        LAUNCH(early_read, (const float *)a, b);
        break;
    case 4:   /* an event between them: fine */
        LAUNCH(produce, a);
        cudaEventRecord(ev, st);
        LAUNCH(early_read, (const float *)a, b);
        break;
    case 5:   /* captured into a graph, the race replays: reported at the launch */
        {
            cudaGraph_t g;
            cudaGraphExec_t x;
            cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal);
            LAUNCH(produce, a);
            LAUNCH(early_read, (const float *)a, b);
            cudaStreamEndCapture(st, &g);
            cudaGraphInstantiate(&x, g, 0);
            cudaGraphLaunch(x, st);
        }
        break;
    case 6: { /* cp.async: lands at its wait, zero-filled past its size */
        float h[N], got[N];
        for (int i = 0; i < N; i++)
            h[i] = 1.0f + (float)i;
        cudaMemcpy(a, h, sizeof h, cudaMemcpyHostToDevice);
        l8k_launch("stage", stage, dim3(1), dim3(128), st, (const float *)a, b);
        cudaMemcpy(got, b, sizeof got, cudaMemcpyDeviceToHost);
        int bad = 0;
        for (int i = 0; i < 128; i++) {
            const int nb = (i + 1) % 128;
            bad += got[4 * i] != -1.0f;   /* read before the wait: not landed */
            for (int k = 1; k < 4; k++)
                bad += got[4 * i + k] != (nb % 2 ? 0.0f : h[4 * nb + k]);
        }
        if (bad) {
            fprintf(stderr, "stage: %d values wrong\n", bad);
            _exit(1);
        }
        break;
    }
    case 7:
        l8k_launch("unwaited", unwaited, dim3(1), dim3(32), st, (const float *)a);
        break;
    case 8:    /* the fetch unfenced, landing early: its neighbour reads tile 1 */
    case 9:    /* fenced: tile 0 whenever it lands */
    case 10: { /* unfenced, landing at the wait: the race goes unseen */
        if (c != 10)
            setenv("CUEMU_CP_ASYNC", "early", 1);
        float h[N], got[128];
        for (int i = 0; i < N; i++)
            h[i] = 1.0f + (float)i;
        cudaMemcpy(a, h, sizeof h, cudaMemcpyHostToDevice);
        l8k_launch("refetch", refetch, dim3(1), dim3(128), st, (const float *)a, b, c == 9);
        cudaMemcpy(got, b, sizeof got, cudaMemcpyDeviceToHost);
        int stale = 0;
        for (int i = 0; i < 128; i++)
            stale += got[i] != h[4 * ((i + 1) % 128)];
        if (stale) {
            fprintf(stderr, "refetch: %d threads read their neighbour's next tile\n", stale);
            _exit(1);
        }
        break;
    }
    case 11:   /* blocks in order: each reads its successor's flag unset */
    case 12: { /* reversed: set */
        if (c == 12)
            setenv("CUEMU_ORDER", "reverse", 1);
        LAUNCH(read_next_block, a, b);
        float got[N / 128];
        cudaMemcpy(got, b, sizeof got, cudaMemcpyDeviceToHost);
        int other = 0;
        for (int i = 0; i + 1 < N / 128; i++)
            other += got[i] != (c == 12 ? 1.0f : 0.0f);
        if (other) {
            fprintf(stderr, "read_next_block: %d blocks saw the other order\n", other);
            _exit(1);
        }
        break;
    }
    case 13: { /* lazy: a copy to pinned memory, read before and after the sync */
        float *hp;
        cudaMallocHost((void **)&hp, N * sizeof(float));
        LAUNCH(produce, a);
        cudaMemcpyAsync(hp, a, N * sizeof(float), cudaMemcpyDeviceToHost, st);
        uint32_t before;
        memcpy(&before, &hp[1], 4);
        cudaStreamSynchronize(st);
        if (before != 0xa5a5a5a5u || hp[1] != 1.0f) {
            fprintf(stderr, "pinned result: %08x before the sync, %g after\n", before, hp[1]);
            _exit(1);
        }
        break;
    }
    case 14: { /* lazy: sources rewritten after the call, before the sync */
        float *hp, h[N], got[N];
        cudaMallocHost((void **)&hp, N * sizeof(float));
        for (int i = 0; i < N; i++)
            hp[i] = 1.0f, h[i] = 3.0f;
        cudaMemcpyAsync(a, hp, N * sizeof(float), cudaMemcpyHostToDevice, st);
        cudaMemcpyAsync(b, h, N * sizeof(float), cudaMemcpyHostToDevice, st);
        for (int i = 0; i < N; i++)
            hp[i] = 2.0f, h[i] = 4.0f;
        cudaStreamSynchronize(st);
        cudaMemcpy(got, a, sizeof got, cudaMemcpyDeviceToHost);
        float pg;
        cudaMemcpy(&pg, b, 4, cudaMemcpyDeviceToHost);
        if (got[0] != 2.0f || pg != 3.0f) {
            fprintf(stderr, "pinned source gave %g (want 2), pageable %g (want 3)\n", got[0], pg);
            _exit(1);
        }
        break;
    }
    case 15: { /* lazy: cudaMemset and a non-blocking stream, unordered, then ordered */
        cudaStream_t nb;
        cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking);
        float got[2];
        LAUNCH(produce, a);
        cudaStreamSynchronize(st);
        cudaMemset(a, 0, N * sizeof(float));
        cudaMemcpyAsync(b, a, N * sizeof(float), cudaMemcpyDeviceToDevice, nb);
        cudaStreamSynchronize(nb);
        cudaMemcpy(&got[0], b + 1, 4, cudaMemcpyDeviceToHost);
        LAUNCH(produce, a);
        cudaStreamSynchronize(st);
        cudaMemset(a, 0, N * sizeof(float));
        cudaStreamSynchronize(0);
        cudaMemcpyAsync(b, a, N * sizeof(float), cudaMemcpyDeviceToDevice, nb);
        cudaStreamSynchronize(nb);
        cudaMemcpy(&got[1], b + 1, 4, cudaMemcpyDeviceToHost);
        if (got[0] != 1.0f || got[1] != 0.0f) {
            fprintf(stderr, "memset then a non-blocking copy: %g (want 1: unordered), "
                            "with a sync between %g (want 0)\n", got[0], got[1]);
            _exit(1);
        }
        break;
    }
    case 16: { /* lazy: an event synchronizes up to it; on an idle stream, at once */
        float *hp;
        cudaMallocHost((void **)&hp, 2 * sizeof(float));
        cudaEvent_t e1, e2;
        cudaEventCreate(&e1);
        cudaEventCreate(&e2);
        LAUNCH(produce, a);
        cudaMemcpyAsync(&hp[0], a + 1, 4, cudaMemcpyDeviceToHost, st);
        cudaEventRecord(ev, st);
        cudaMemcpyAsync(&hp[1], a + 1, 4, cudaMemcpyDeviceToHost, st);
        const bool pending = cudaEventQuery(ev) == cudaErrorNotReady;
        cudaEventSynchronize(ev);
        uint32_t second;
        memcpy(&second, &hp[1], 4);
        cudaStreamSynchronize(st);
        cudaEventRecord(e1, st);
        usleep(20000);
        cudaEventRecord(e2, st);
        cudaEventSynchronize(e2);
        float ms = 0;
        cudaEventElapsedTime(&ms, e1, e2);
        if (!pending || hp[0] != 1.0f || second != 0xa5a5a5a5u || ms < 15.0f) {
            fprintf(stderr, "event: pending %d, before it %g, after it %08x, idle stream "
                            "around a 20 ms sleep %.1f ms\n", pending, hp[0], second, ms);
            _exit(1);
        }
        break;
    }
    }
    cudaStreamSynchronize(st);
}

int main(void)
{
    static const struct { const char *what; const char *report; } cases[] = {
        { "weights read before the wait", NULL },
        { "input read before the wait", "early_read: thread 0 of block (0,0,0) read" },
        { "write before the wait to what the kernel before reads",
          "early_write: thread 127 of block (7,0,0) wrote" },
        { "input read early after a synchronization", NULL },
        { "input read early after an event", NULL },
        { "input read before the wait, in a graph", "the kernel before it on the stream, writes" },
        { "cp.async: lands at its wait, zeros past its size", NULL },
        { "cp.async never waited for",
          "unwaited: thread 5 of block (0,0,0) ended with cp.async copies it never waited for" },
        { "cp.async landing early over data not yet read", "refetch: " },
        { "cp.async landing early, a barrier before the fetch", NULL },
        { "cp.async landing at the wait over data not yet read (unseen)", NULL },
        { "blocks first to last: a later block's write unseen", NULL },
        { "blocks last to first (CUEMU_ORDER=reverse): a later block's write seen", NULL },
        { "lazy: a copy to pinned memory, poisoned until the sync", NULL },
        { "lazy: a pinned source read at the sync, a pageable one at the call", NULL },
        { "lazy: cudaMemset and a non-blocking stream unordered until a sync", NULL },
        { "lazy: an event completes the work up to it only; idle, at once", NULL },
    };
    for (int c = 0; c < (int)(sizeof cases / sizeof *cases); c++) {
        int fds[2];
        REQUIRE(pipe(fds) == 0, "pipe");
        pid_t pid = fork();
        if (pid == 0) {
            dup2(fds[1], 2);
            close(fds[0]);
            run_case(c);
            _exit(0);
        }
        close(fds[1]);
        char out[4096];
        size_t n = 0;
        ssize_t r;
        while (n < sizeof out - 1 && (r = read(fds[0], out + n, sizeof out - 1 - n)) > 0)
            n += (size_t)r;
        out[n] = 0;
        close(fds[0]);
        int status = 0;
        waitpid(pid, &status, 0);
        const bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        const bool ok = cases[c].report ? !clean && strstr(out, cases[c].report) != NULL
                                        : clean;
        printf("%s: %s: %s\n", ok ? "ok" : "FAIL", cases[c].what,
               cases[c].report ? (clean ? "not reported" : "reported") : (clean ? "clean" : out));
        CHECK(ok, "%s:\n%s", cases[c].what, out);
    }
    printf("%s (%d failures)\n", t_failures ? "FAILED" : "ok", t_failures);
    return t_failures ? T_EXIT_FAIL : T_EXIT_PASS;
}
