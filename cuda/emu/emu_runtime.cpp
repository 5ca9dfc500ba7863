// The emulator's scheduler and a fake CUDA runtime (the calls backends/cuda and cuda/ make), see emu.h.
#include "emu.h"

#include <ucontext.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace sift_emu {

namespace {

struct Pending {
    int group;
    void *dst;
    const void *src;
    int n; // bytes read from src; the rest of the 16 are zero
};

struct Thread {
    ucontext_t uc;
    Ctx ctx;
    unsigned lin;
    bool done;
    const char *waiting; // what it waits for, for deadlock reports
    std::vector<Pending> pend;
    int committed;
};

constexpr size_t STACK = 256 * 1024;
constexpr size_t CANARY = 64;

std::vector<Thread> threads;
std::vector<char *> stacks;
ucontext_t main_uc;
int current = -1;
unsigned nthreads;
std::function<void()> *body;
std::vector<unsigned char> smem_buf;
size_t smem_size;
unsigned bar_count, bar_gen;
std::vector<unsigned> warp_count, warp_gen;
std::vector<uint64_t> warp_slot; // [warp][32]
constexpr size_t WARP_GATHER_MAX = 64;
std::vector<unsigned char> warp_gather_buf; // [warp][32][WARP_GATHER_MAX]
uint64_t progress;
std::mt19937 rng;
bool late_cpasync = true;
bool in_kernel = false;

[[noreturn]] void die(const char *what)
{
    fprintf(stderr, "sift-emu: %s\n", what);
    abort();
}

void yield(const char *why)
{
    Thread &t = threads[(size_t)current];
    t.waiting = why;
    swapcontext(&t.uc, &main_uc);
    threads[(size_t)current].waiting = nullptr;
}

void entry()
{
    (*body)();
    Thread &t = threads[(size_t)current];
    t.done = true;
    t.pend.clear(); // copies still in flight at exit are never read
    progress++;
}

unsigned warp_size(unsigned w) { return std::min(32u, nthreads - 32 * w); }

void warp_barrier()
{
    const unsigned w = linear_tid() / 32;
    const unsigned g = warp_gen[w];
    if (++warp_count[w] == warp_size(w)) {
        warp_count[w] = 0;
        warp_gen[w]++;
        progress++;
        return;
    }
    while (warp_gen[w] == g) yield("a warp collective");
}

void complete(Pending &p)
{
    if (p.n) memcpy(p.dst, p.src, (size_t)p.n);
    memset(static_cast<char *>(p.dst) + p.n, 0, (size_t)(16 - p.n));
}

} // namespace

Ctx &cur()
{
    if (current < 0) die("device code called outside a kernel");
    return threads[(size_t)current].ctx;
}
unsigned linear_tid() { return threads[(size_t)current].lin; }
unsigned char *dynamic_smem() { return smem_buf.data() + CANARY; }

void syncthreads()
{
    const unsigned g = bar_gen;
    if (++bar_count == nthreads) {
        bar_count = 0;
        bar_gen++;
        progress++;
        return;
    }
    while (bar_gen == g) yield("__syncthreads");
}

uint64_t warp_exchange(uint64_t mine, int src)
{
    const unsigned lin = linear_tid(), w = lin / 32;
    if ((unsigned)src >= warp_size(w)) die("shuffle from a lane outside the warp");
    warp_slot[w * 32 + lin % 32] = mine;
    warp_barrier();
    const uint64_t r = warp_slot[w * 32 + (unsigned)src];
    warp_barrier();
    return r;
}

void warp_gather(const void *mine, void *all, size_t bytes)
{
    if (bytes > WARP_GATHER_MAX) die("warp_gather of more than 64 bytes a lane");
    const unsigned lin = linear_tid(), w = lin / 32;
    memcpy(&warp_gather_buf[((size_t)w * 32 + lin % 32) * WARP_GATHER_MAX], mine, bytes);
    warp_barrier();
    for (unsigned l = 0; l < 32; l++)
        memcpy(static_cast<unsigned char *>(all) + l * bytes,
               &warp_gather_buf[((size_t)w * 32 + (l < warp_size(w) ? l : 0)) * WARP_GATHER_MAX], bytes);
    warp_barrier();
}

uint32_t warp_ballot(bool p)
{
    const unsigned lin = linear_tid(), w = lin / 32;
    warp_slot[w * 32 + lin % 32] = p;
    warp_barrier();
    uint32_t m = 0;
    for (unsigned l = 0; l < warp_size(w); l++)
        if (warp_slot[w * 32 + l]) m |= 1u << l;
    warp_barrier();
    return m;
}

uint32_t warp_match_any(uint64_t v)
{
    const unsigned lin = linear_tid(), w = lin / 32;
    warp_slot[w * 32 + lin % 32] = v;
    warp_barrier();
    uint32_t m = 0;
    for (unsigned l = 0; l < warp_size(w); l++)
        if (warp_slot[w * 32 + l] == v) m |= 1u << l;
    warp_barrier();
    return m;
}

void cp_async16(void *dst, const void *src, int n)
{
    const unsigned char *d = static_cast<unsigned char *>(dst);
    if (d < dynamic_smem() || d + 16 > dynamic_smem() + smem_size) die("cp.async outside the dynamic shared memory");
    if (n < 0 || n > 16) die("cp.async of a source size outside 0..16");
    if ((uintptr_t)dst % 16 || (n && (uintptr_t)src % 16)) die("cp.async of a misaligned 16-byte chunk");
    if (n && !readable(src, (size_t)n)) die("cp.async reads outside every allocation");
    Thread &t = threads[(size_t)current];
    Pending p{t.committed, dst, src, n};
    if (late_cpasync) t.pend.push_back(p);
    else complete(p);
}

void cp_async_commit() { threads[(size_t)current].committed++; }

void cp_async_wait(int n)
{
    Thread &t = threads[(size_t)current];
    std::vector<Pending> keep;
    for (Pending &p : t.pend) {
        if (p.group < t.committed - n) complete(p);
        else keep.push_back(p);
    }
    t.pend.swap(keep);
}

static void run_block(dim3 grid, dim3 block, uint3 bid)
{
    nthreads = block.x * block.y * block.z;
    threads.assign(nthreads, Thread{});
    while (stacks.size() < nthreads) stacks.push_back(static_cast<char *>(malloc(STACK)));
    const unsigned warps = (nthreads + 31) / 32;
    warp_count.assign(warps, 0);
    warp_gen.assign(warps, 0);
    warp_slot.assign((size_t)warps * 32, 0);
    warp_gather_buf.assign((size_t)warps * 32 * WARP_GATHER_MAX, 0);
    bar_count = 0;
    for (unsigned i = 0; i < nthreads; i++) {
        Thread &t = threads[i];
        t.lin = i;
        t.ctx.tid = make_uint3(i % block.x, (i / block.x) % block.y, i / (block.x * block.y));
        t.ctx.bid = bid;
        t.ctx.bdim = block;
        t.ctx.gdim = grid;
        getcontext(&t.uc);
        t.uc.uc_stack.ss_sp = stacks[i];
        t.uc.uc_stack.ss_size = STACK;
        t.uc.uc_link = &main_uc;
        makecontext(&t.uc, entry, 0);
    }
    std::vector<unsigned> order(nthreads);
    for (unsigned i = 0; i < nthreads; i++) order[i] = i;
    unsigned left = nthreads;
    while (left) {
        std::shuffle(order.begin(), order.end(), rng);
        const uint64_t before = progress;
        bool ran = false;
        for (unsigned i : order) {
            if (threads[i].done) continue;
            current = (int)i;
            swapcontext(&main_uc, &threads[i].uc);
            current = -1;
            ran = true;
        }
        left = 0;
        for (const Thread &t : threads) left += !t.done;
        if (ran && left && progress == before) {
            fprintf(stderr, "sift-emu: deadlock in block (%u,%u,%u):\n", bid.x, bid.y, bid.z);
            for (const Thread &t : threads)
                if (!t.done) fprintf(stderr, "  thread %u waits at %s\n", t.lin, t.waiting ? t.waiting : "?");
            for (const Thread &t : threads)
                if (t.done) {
                    fprintf(stderr, "  (thread %u has exited)\n", t.lin);
                    break;
                }
            abort();
        }
    }
}

namespace {
struct Stream {
    bool capturing = false;
    std::vector<std::function<void()>> *graph = nullptr;
};
std::map<const void *, int> max_dynamic_smem;
cudaError_t sticky = cudaSuccess;

void enqueue(cudaStream_t st, std::function<void()> f)
{
    Stream *s = reinterpret_cast<Stream *>(st);
    if (s && s->capturing) s->graph->push_back(std::move(f));
    else f();
}
} // namespace

cudaError_t launch_impl(const void *fn, dim3 grid, dim3 block, size_t smem, cudaStream_t st, std::function<void()> f)
{
    const uint64_t nb = (uint64_t)grid.x * grid.y * grid.z, nt = (uint64_t)block.x * block.y * block.z;
    if (nb == 0 || nt == 0 || nt > 1024 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535 ||
        block.z > 64) {
        fprintf(stderr, "sift-emu: bad launch configuration grid (%u,%u,%u) block (%u,%u,%u)\n", grid.x, grid.y, grid.z,
                block.x, block.y, block.z);
        return cudaErrorInvalidConfiguration;
    }
    if (smem > 48 * 1024) {
        auto it = max_dynamic_smem.find(fn);
        if (it == max_dynamic_smem.end() || (size_t)it->second < smem) {
            fprintf(stderr, "sift-emu: %zu bytes of dynamic shared memory without the attribute\n", smem);
            return cudaErrorInvalidValue;
        }
    }
    if (smem > 232448) return cudaErrorInvalidValue;
    enqueue(st, [=]() {
        if (in_kernel) die("nested launch");
        in_kernel = true;
        std::function<void()> k = f;
        body = &k;
        smem_size = smem;
        for (uint32_t z = 0; z < grid.z; z++)
            for (uint32_t y = 0; y < grid.y; y++)
                for (uint32_t x = 0; x < grid.x; x++) {
                    smem_buf.assign(smem + 2 * CANARY, 0xff); // NaN bytes; canaries around
                    run_block(grid, block, make_uint3(x, y, z));
                    for (size_t i = 0; i < CANARY; i++)
                        if (smem_buf[i] != 0xff || smem_buf[CANARY + smem + i] != 0xff)
                            die("a kernel wrote outside its dynamic shared memory");
                }
        body = nullptr;
        in_kernel = false;
    });
    return cudaSuccess;
}

struct Init {
    Init()
    {
        const char *seed = getenv("SIFT_EMU_SEED");
        rng.seed(seed ? (unsigned)atoi(seed) : 1u);
        const char *mode = getenv("SIFT_EMU_CPASYNC");
        late_cpasync = !(mode && strcmp(mode, "early") == 0);
    }
} init;

} // namespace sift_emu

// ---- a fake CUDA runtime: one device, host memory, synchronous streams --------------------------

using namespace sift_emu;

namespace {
int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}
struct Alloc {
    size_t size;
};
std::map<void *, Alloc> allocs;
} // namespace

// [p, p + n) lies inside one cudaMalloc'd block (the exact size asked for, not the rounding).
bool sift_emu::readable(const void *p, size_t n)
{
    const char *c = static_cast<const char *>(p);
    auto it = allocs.upper_bound(const_cast<char *>(c));
    if (it == allocs.begin()) return false;
    --it;
    const char *b = static_cast<const char *>(it->first);
    return c >= b && c + n <= b + it->second.size;
}

extern "C" {

cudaError_t cudaGetDeviceCount(int *count)
{
    *count = env_int("SIFT_EMU_DEVICES", 1);
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device >= 0 && device < env_int("SIFT_EMU_DEVICES", 1) ? cudaSuccess : cudaErrorInvalidDevice; }
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    (void)device;
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "sift CUDA emulator (CPU)");
    prop->major = env_int("SIFT_EMU_CC", 90) / 10;
    prop->minor = env_int("SIFT_EMU_CC", 90) % 10;
    prop->multiProcessorCount = env_int("SIFT_EMU_SMS", 4);
    return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int *v)
{
    *v = 13000;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    (void)device;
    switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = env_int("SIFT_EMU_SMS", 4); break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = env_int("SIFT_EMU_SMEM_PER_SM", 233472); break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = env_int("SIFT_EMU_SMEM_PER_SM", 233472) - 1024; break;
    case cudaDevAttrReservedSharedMemoryPerBlock: *value = 1024; break;
    default: return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value > env_int("SIFT_EMU_SMEM_PER_SM", 233472) - 1024) return cudaErrorInvalidValue;
        max_dynamic_smem[func] = value;
    }
    return cudaSuccess;
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, const void *func, int block, size_t smem)
{
    (void)func, (void)block;
    const int by_smem = (int)((size_t)env_int("SIFT_EMU_SMEM_PER_SM", 233472) / (smem + 1024));
    *n = std::max(0, std::min(2, by_smem));
    return cudaSuccess;
}
cudaError_t cudaGetLastError(void)
{
    const cudaError_t e = sticky;
    sticky = cudaSuccess;
    return e;
}
const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "emulated CUDA error"; }
const char *cudaGetErrorName(cudaError_t e)
{
    static char buf[32];
    snprintf(buf, sizeof buf, "cudaError %d", (int)e);
    return buf;
}
cudaError_t cudaMalloc(void **p, size_t size)
{
    if ((double)size > (double)env_int("SIFT_EMU_MEM_MB", 8192) * 1048576.0) {
        *p = nullptr;
        return cudaErrorMemoryAllocation;
    }
    *p = aligned_alloc(256, (size + 255) & ~(size_t)255);
    if (!*p) return cudaErrorMemoryAllocation;
    memset(*p, 0xff, size); // uninitialized device memory reads as NaN
    allocs[*p] = Alloc{size};
    return cudaSuccess;
}
cudaError_t cudaFree(void *p)
{
    if (!p) return cudaSuccess;
    if (!allocs.erase(p)) return cudaErrorInvalidValue;
    free(p);
    return cudaSuccess;
}
// Mapped pinned host memory: ordinary memory here, as readable to the kernels as cudaMalloc's, at
// the same address on both sides (unified addressing).
cudaError_t cudaHostAlloc(void **p, size_t size, unsigned int flags)
{
    (void)flags;
    *p = aligned_alloc(4096, (size + 4095) & ~(size_t)4095);
    if (!*p) return cudaErrorMemoryAllocation;
    memset(*p, 0xff, size);
    allocs[*p] = Alloc{size};
    return cudaSuccess;
}
cudaError_t cudaHostGetDevicePointer(void **d, void *h, unsigned int flags)
{
    (void)flags;
    if (!allocs.count(h)) return cudaErrorInvalidValue;
    *d = h;
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p) { return cudaFree(p); }
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total)
{
    *total = (size_t)env_int("SIFT_EMU_MEM_MB", 8192) * 1048576;
    size_t used = 0;
    for (auto &a : allocs) used += a.second.size;
    *free_b = used < *total ? *total - used : 0;
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t st)
{
    enqueue(st, [=]() { memset(p, v, n); });
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t st)
{
    (void)kind;
    enqueue(st, [=]() { memcpy(dst, src, n); });
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *st, unsigned flags)
{
    (void)flags;
    *st = reinterpret_cast<cudaStream_t>(new Stream);
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t st)
{
    delete reinterpret_cast<Stream *>(st);
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t st)
{
    Stream *s = reinterpret_cast<Stream *>(st);
    return s && s->capturing ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t st, enum cudaStreamCaptureMode mode)
{
    (void)mode;
    Stream *s = reinterpret_cast<Stream *>(st);
    if (s->capturing) return cudaErrorIllegalState;
    s->capturing = true;
    s->graph = new std::vector<std::function<void()>>;
    return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t st, cudaGraph_t *graph)
{
    Stream *s = reinterpret_cast<Stream *>(st);
    if (!s->capturing) return cudaErrorIllegalState;
    s->capturing = false;
    *graph = reinterpret_cast<cudaGraph_t>(s->graph);
    s->graph = nullptr;
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags)
{
    (void)flags;
    *exec = reinterpret_cast<cudaGraphExec_t>(
        new std::vector<std::function<void()>>(*reinterpret_cast<std::vector<std::function<void()>> *>(graph)));
    return cudaSuccess;
}
cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph, cudaGraphExecUpdateResultInfo *info)
{
    if (info) *info = cudaGraphExecUpdateResultInfo{};
    auto *e = reinterpret_cast<std::vector<std::function<void()>> *>(exec);
    auto *g = reinterpret_cast<std::vector<std::function<void()>> *>(graph);
    if (e->size() != g->size()) return cudaErrorGraphExecUpdateFailure; /* another topology, as CUDA refuses it */
    *e = *g;
    return cudaSuccess;
}
cudaError_t cudaGraphUpload(cudaGraphExec_t exec, cudaStream_t st)
{
    (void)exec, (void)st; /* nothing to upload: launches run the recorded calls on the host */
    return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    delete reinterpret_cast<std::vector<std::function<void()>> *>(graph);
    return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
    delete reinterpret_cast<std::vector<std::function<void()>> *>(exec);
    return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t st)
{
    (void)st;
    for (auto &f : *reinterpret_cast<std::vector<std::function<void()>> *>(exec)) f();
    return cudaSuccess;
}
static long long event_clock;
cudaError_t cudaEventCreate(cudaEvent_t *ev)
{
    *ev = reinterpret_cast<cudaEvent_t>(new long long(0));
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned flags)
{
    (void)flags;
    return cudaEventCreate(ev);
}
cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t ev, unsigned flags)
{
    (void)st, (void)ev, (void)flags; /* the emulator runs every call in order as it comes */
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t ev)
{
    delete reinterpret_cast<long long *>(ev);
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t st)
{
    long long *e = reinterpret_cast<long long *>(ev);
    enqueue(st, [e]() { *e = ++event_clock; });
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    *ms = (float)(*reinterpret_cast<long long *>(b) - *reinterpret_cast<long long *>(a)) * 1e-3f;
    return cudaSuccess;
}

} // extern "C"
