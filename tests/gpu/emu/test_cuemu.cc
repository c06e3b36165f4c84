/* test_cuemu.cc - the emulation's check of the PDL contract (cuemu.cc):
 * a kernel launched with programmatic dependent launch that touches, before
 * its l8k_pdl_wait(), what the kernel before it on the stream writes (or
 * writes what that kernel reads) is reported, naming both; what is not the
 * kernel before's (weights), or a kernel after other work on the stream,
 * is not. Each case runs in a child process, since a report aborts. */
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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
    };
    int failures = 0;
    for (int c = 0; c < (int)(sizeof cases / sizeof *cases); c++) {
        int fds[2];
        if (pipe(fds))
            return 1;
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
        if (!ok) {
            fputs(out, stdout);
            failures++;
        }
    }
    printf("%s (%d failures)\n", failures ? "FAILED" : "ok", failures);
    return failures ? 1 : 0;
}
