// emu_runtime.cpp: the scheduler and runtime API behind the minisgl CPU emulator for CUDA.
//
// The big picture:
//  * A launch runs its blocks one after another, synchronously, on the calling host thread.
//  * Inside a block every CUDA thread is a stackful coroutine. The scheduler resumes runnable
//    threads in order; a thread runs until it reaches a barrier or a warp collective (or exits),
//    where it records what it offers and switches back to the scheduler.
//  * The last thread to arrive completes the collective: it computes every participant's result
//    and makes them all runnable again. If nothing is runnable and nothing can complete, the
//    block is deadlocked and the emulator says who waits where.
//  * cudaMalloc puts every buffer so that it ends exactly where a PROT_NONE guard page starts,
//    so the first byte past the end faults; the SIGSEGV handler knows which kernel, block and
//    thread was running and reports it.
// Every error the emulator detects is fatal: it prints "emu: error: ...", writes the report file
// that tools/emu_kernels.py reads, and exits with kErrorExitCode.
#define MINISGL_EMU_RUNTIME 1
#include "emu_cuda.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <map>
#include <string>
#include <vector>

namespace emu {

uint3 g_thread_idx = {0, 0, 0};
uint3 g_block_idx = {0, 0, 0};
dim3 g_block_dim;
dim3 g_grid_dim;
void* g_dyn_smem = nullptr;

namespace {

constexpr int kErrorExitCode = 86;
constexpr size_t kPage = 4096;
constexpr size_t kDefaultSmem = 48 * 1024;     // without cudaFuncSetAttribute
constexpr size_t kMaxSmemOptin = 232448;       // sharedMemPerBlockOptin of an H100/H200 (227 KB)
constexpr size_t kDeviceMemory = 150754820096; // 143771 MiB, what an H200 reports

// ---------------------------------------------------------------------------------------------
// Error messages. A fixed buffer keeps the fault handlers away from malloc.
// ---------------------------------------------------------------------------------------------
struct Msg {
    char text[8192];
    size_t len = 0;
    Msg() { text[0] = 0; }
    __attribute__((format(printf, 2, 3))) Msg& add(const char* fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(text + len, sizeof(text) - len, fmt, ap);
        va_end(ap);
        if (n > 0) len = std::min(sizeof(text) - 1, len + static_cast<size_t>(n));
        return *this;
    }
};

const char* g_report_path = nullptr;
int g_kernels_run = 0;

void write_all(int fd, const char* s, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, s, n);
        if (w <= 0) return;
        s += w;
        n -= static_cast<size_t>(w);
    }
}

// The report tools/emu_kernels.py reads. Written with plain system calls: it may be called from a
// signal handler, where stdio and malloc are off limits.
void write_report(int errors) {
    if (!g_report_path) return;
    char text[64];
    int n = snprintf(text, sizeof(text), "kernels=%d\nerrors=%d\n", g_kernels_run, errors);
    int fd = open(g_report_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return;
    write_all(fd, text, static_cast<size_t>(n));
    close(fd);
}

// Prints "emu: error: <first line>" and indents the following lines, then exits.
[[noreturn]] void die(const Msg& m) {
    fflush_unlocked(stdout);
    Msg out;
    out.add("emu: error: ");
    for (size_t i = 0; i < m.len; ++i) {
        out.add("%c", m.text[i]);
        if (m.text[i] == '\n' && i + 1 < m.len) out.add("emu:   ");
    }
    if (out.len == 0 || out.text[out.len - 1] != '\n') out.add("\n");
    write_all(2, out.text, out.len);
    write_report(1);
    _exit(kErrorExitCode);
}

// ---------------------------------------------------------------------------------------------
// Coroutine contexts. On x86-64 a hand-written switch saves the callee-saved registers on the
// old stack and swaps stack pointers (a few nanoseconds, no system call); elsewhere ucontext.
// ---------------------------------------------------------------------------------------------
#if defined(__x86_64__)
extern "C" void emu_ctx_switch(void** save_sp, void* load_sp);
asm(R"(
    .text
    .globl emu_ctx_switch
    .type emu_ctx_switch, @function
emu_ctx_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_ctx_switch, .-emu_ctx_switch
)");
struct Context {
    void* sp = nullptr;
};
inline void context_switch(Context& from, Context& to) { emu_ctx_switch(&from.sp, to.sp); }
// Lays out a fresh stack so that emu_ctx_switch "returns" into entry() with the stack aligned as
// after a call (rsp % 16 == 8) and a zero return address above it: entry() must never return.
void context_init(Context& c, char* stack_lo, size_t size, void (*entry)()) {
    uintptr_t top = (reinterpret_cast<uintptr_t>(stack_lo) + size) & ~uintptr_t(15);
    uint64_t* sp = reinterpret_cast<uint64_t*>(top - 16 - 72);  // sp % 16 == 8
    sp[0] = 0x037F00001F80ull;  // default x87 control word (high half) and MXCSR (low half)
    for (int i = 1; i <= 6; ++i) sp[i] = 0;  // r15 r14 r13 r12 rbx rbp
    sp[7] = reinterpret_cast<uint64_t>(entry);
    sp[8] = 0;
    c.sp = sp;
}
#else
struct Context {
    ucontext_t uc;
};
inline void context_switch(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
void context_init(Context& c, char* stack_lo, size_t size, void (*entry)()) {
    getcontext(&c.uc);
    c.uc.uc_stack.ss_sp = stack_lo;
    c.uc.uc_stack.ss_size = size;
    c.uc.uc_link = nullptr;
    makecontext(&c.uc, entry, 0);
}
#endif

// ---------------------------------------------------------------------------------------------
// Coroutine stacks: one per thread slot of a block, mmap'ed once and reused by every block, each
// with a PROT_NONE guard page below it so that a stack overflow faults instead of corrupting.
// ---------------------------------------------------------------------------------------------
size_t g_stack_size = 256 * 1024;
std::vector<char*> g_stacks;  // lowest usable address of each stack; its guard page is below

char* stack_for(size_t i) {
    while (g_stacks.size() <= i) {
        size_t len = g_stack_size + kPage;
        void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) die(Msg().add("cannot map a %zu KB coroutine stack", g_stack_size / 1024));
        mprotect(p, kPage, PROT_NONE);
        g_stacks.push_back(static_cast<char*>(p) + kPage);
    }
    return g_stacks[i];
}

bool in_stack_guard(uintptr_t addr) {
    for (char* s : g_stacks) {
        uintptr_t lo = reinterpret_cast<uintptr_t>(s);
        if (addr >= lo - kPage && addr < lo) return true;
    }
    return false;
}

// ---------------------------------------------------------------------------------------------
// CUDA threads and blocks.
// ---------------------------------------------------------------------------------------------
enum class State : uint8_t { Runnable, Barrier, Warp, ActiveMask, Exited };

struct Thread {
    Context ctx;
    uint3 idx;
    int linear, lane, warp;
    State state;
    // What the thread waits for: a barrier (arg = BarrierKind) or a warp collective.
    Op op;
    unsigned mask;
    int arg, width;
    uint64_t value;
    const char* file;
    int line;
    // What it gets back.
    uint64_t result;
    int pred;
};

struct WarpState {
    unsigned exists;   // lanes that are threads of the block (the last warp can be partial)
    unsigned exited;
    unsigned waiting;  // lanes suspended in a warp collective
};

struct Block {
    std::vector<Thread> threads;
    std::vector<WarpState> warps;
    std::vector<int> queue;  // ring buffer of runnable thread indices
    size_t head = 0, count = 0;
    int live = 0;            // threads that have not exited
    int at_barrier = 0;
    int barrier_pred = 0;    // how many arrivals passed a non-zero predicate
    const char* barrier_file = nullptr;
    int barrier_line = 0, barrier_kind = 0;
    bool barrier_mismatch = false;

    void push(int i) { queue[(head + count++) % queue.size()] = i; }
    int pop() {
        int i = queue[head];
        head = (head + 1) % queue.size();
        --count;
        return i;
    }
};

struct Launch {
    const char* name;
    LaunchConfig config;
    KernelBody body;
};

Launch* g_launch = nullptr;
Thread* g_cur = nullptr;  // the CUDA thread running now, or null in host code
Context g_sched;          // the scheduler's (host thread's) context
Block g_block;
volatile uint64_t g_switches = 0;  // context switches (also feeds clock64())
volatile uint64_t g_progress = 0;  // arrivals at barriers and collectives, thread exits
volatile bool g_in_kernel = false;

unsigned lane_bit(int lane) { return 1u << lane; }

Msg& add_dim(Msg& m, uint3 v) { return m.add("(%u,%u,%u)", v.x, v.y, v.z); }

Msg& add_kernel_block(Msg& m) {
    m.add("kernel `%s`, block ", g_launch ? g_launch->name : "?");
    return add_dim(m, g_block_idx);
}

// "in kernel `k`, block (b), thread (t)" or "in host code".
Msg& add_where(Msg& m) {
    if (!g_in_kernel || !g_launch) return m.add("in host code");
    m.add("in ");
    add_kernel_block(m);
    if (g_cur) {
        m.add(", thread ");
        add_dim(m, g_cur->idx);
    }
    return m;
}

const char* op_name(Op op) {
    switch (op) {
    case Op::ShflIdx: return "__shfl_sync";
    case Op::ShflUp: return "__shfl_up_sync";
    case Op::ShflDown: return "__shfl_down_sync";
    case Op::ShflXor: return "__shfl_xor_sync";
    case Op::Ballot: return "__ballot_sync";
    case Op::Any: return "__any_sync";
    case Op::All: return "__all_sync";
    case Op::SyncWarp: return "__syncwarp";
    case Op::MatchAny: return "__match_any_sync";
    case Op::MatchAll: return "__match_all_sync";
    case Op::ReduceAdd: return "__reduce_add_sync";
    case Op::ReduceMinU: case Op::ReduceMinS: return "__reduce_min_sync";
    case Op::ReduceMaxU: case Op::ReduceMaxS: return "__reduce_max_sync";
    case Op::ReduceAnd: return "__reduce_and_sync";
    case Op::ReduceOr: return "__reduce_or_sync";
    case Op::ReduceXor: return "__reduce_xor_sync";
    }
    return "?";
}

const char* barrier_name(int kind) {
    switch (kind) {
    case kBarrierCount: return "__syncthreads_count";
    case kBarrierAnd: return "__syncthreads_and";
    case kBarrierOr: return "__syncthreads_or";
    default: return "__syncthreads";
    }
}

const char* base_name(const char* path) {
    const char* slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

// Where a suspended thread is, e.g. "__shfl_down_sync(mask 0xffffffff) at k.cu:12".
Msg& add_site(Msg& m, const Thread& t) {
    switch (t.state) {
    case State::Barrier: m.add("%s()", barrier_name(t.arg)); break;
    case State::Warp: m.add("%s(mask 0x%08x)", op_name(t.op), t.mask); break;
    case State::ActiveMask: m.add("__activemask()"); break;
    default: return m;
    }
    return m.add(" at %s:%d", base_name(t.file), t.line);
}

// What a thread is doing, e.g. "wait at __syncthreads() at k.cu:12".
Msg& add_wait(Msg& m, const Thread& t) {
    if (t.state == State::Exited) return m.add("exited");
    if (t.state == State::Runnable) return m.add("have not reached a barrier or collective yet");
    m.add("wait at ");
    return add_site(m, t);
}

// "threadIdx.x 0..126 step 2 (64 threads)": indices as arithmetic runs, at most a few of them.
void add_members(Msg& m, const std::vector<int>& v) {
    const auto& ts = g_block.threads;
    if (v.size() == 1) {
        m.add("thread ");
        add_dim(m, ts[static_cast<size_t>(v[0])].idx);
        return;
    }
    bool one_d = g_block_dim.y == 1 && g_block_dim.z == 1;
    m.add("threads with %s ", one_d ? "threadIdx.x" : "linear index");
    size_t i = 0;
    for (int parts = 0; i < v.size(); ++parts) {
        if (parts == 6) {
            m.add(", ...");
            break;
        }
        size_t j = i;
        int stride = i + 1 < v.size() ? v[i + 1] - v[i] : 1;
        while (j + 1 < v.size() && v[j + 1] - v[j] == stride) ++j;
        if (j == i + 1 && stride != 1) j = i;  // two lone indices read better than "a..b step s"
        m.add("%s%d", parts ? ", " : "", v[i]);
        if (j > i) m.add(stride == 1 ? "..%d" : "..%d step %d", v[j], stride);
        i = j + 1;
    }
    m.add(" (%zu threads)", v.size());
}

// Lists threads [first, last) of the block grouped by what they are doing.
void add_thread_table(Msg& m, size_t first, size_t last, bool include_exited) {
    struct Group {
        std::string what;
        std::vector<int> members;
    };
    std::vector<Group> groups;
    for (size_t i = first; i < last; ++i) {
        const Thread& t = g_block.threads[i];
        if (t.state == State::Exited && !include_exited) continue;
        Msg w;
        add_wait(w, t);
        auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) { return g.what == w.text; });
        if (it == groups.end()) it = groups.insert(groups.end(), Group{w.text, {}});
        it->members.push_back(static_cast<int>(i));
    }
    for (const Group& g : groups) {
        m.add("\n");
        add_members(m, g.members);
        m.add(" %s", g.what.c_str());
    }
}

void add_thread_table(Msg& m) { add_thread_table(m, 0, g_block.threads.size(), false); }

Thread* current_thread(const char* what) {
    if (!g_cur) die(Msg().add("%s called from host code, outside any kernel", what));
    return g_cur;
}

// Switches from a CUDA thread back to the scheduler; returns when the thread is resumed.
void suspend(Thread* t) { context_switch(t->ctx, g_sched); }

void make_runnable(Thread& t) {
    t.state = State::Runnable;
    g_block.push(t.linear);
}

// ---------------------------------------------------------------------------------------------
// Block barriers.
// ---------------------------------------------------------------------------------------------
[[noreturn]] void report_barrier_divergence() {
    Msg m;
    m.add("barrier divergence in ");
    add_kernel_block(m);
    m.add(": the threads of one block wait at different __syncthreads() calls (a GPU may hang or "
          "silently mix them up):");
    add_thread_table(m);
    die(m);
}

void release_barrier() {
    Block& b = g_block;
    if (b.barrier_mismatch) report_barrier_divergence();
    int arrived = b.at_barrier, yes = b.barrier_pred;
    for (Thread& t : b.threads) {
        if (t.state != State::Barrier) continue;
        switch (t.arg) {
        case kBarrierCount: t.result = static_cast<uint64_t>(yes); break;
        case kBarrierAnd: t.result = yes == arrived; break;
        case kBarrierOr: t.result = yes > 0; break;
        default: t.result = 0;
        }
        make_runnable(t);
    }
    b.at_barrier = 0;
    b.barrier_pred = 0;
}

}  // namespace

int block_barrier(const char* file, int line, int kind, int pred) {
    Thread* t = current_thread(barrier_name(kind));
    Block& b = g_block;
    t->state = State::Barrier;
    t->file = file;
    t->line = line;
    t->arg = kind;
    if (b.at_barrier == 0) {
        b.barrier_file = file;
        b.barrier_line = line;
        b.barrier_kind = kind;
        b.barrier_mismatch = false;
    } else if (line != b.barrier_line || kind != b.barrier_kind || strcmp(file, b.barrier_file) != 0) {
        b.barrier_mismatch = true;
    }
    ++b.at_barrier;
    ++g_progress;
    if (pred) ++b.barrier_pred;
    // Exited threads count as arrived, as on current GPUs.
    if (b.at_barrier == b.live) release_barrier();
    suspend(t);
    return static_cast<int>(t->result);
}

namespace {

// ---------------------------------------------------------------------------------------------
// Warp collectives.
// ---------------------------------------------------------------------------------------------
Thread* warp_lanes(int warp) { return &g_block.threads[static_cast<size_t>(warp) * 32]; }

// The lane a shuffle reads, exactly as PTX shfl.sync computes it from the lane offset b and the
// clamp/segment value c that the CUDA headers build from `width`; an out-of-range source means
// "keep your own value".
int shfl_source(Op op, int lane, int b, int width) {
    int segmask = (32 - width) & 0x1f;
    int bval = b & 0x1f;
    int cval = op == Op::ShflUp ? 0 : 0x1f;
    int max_lane = (lane & segmask) | (cval & ~segmask);
    int min_lane = lane & segmask;
    int j = lane;
    bool ok = false;
    switch (op) {
    case Op::ShflUp: j = lane - bval; ok = j >= max_lane; break;
    case Op::ShflDown: j = lane + bval; ok = j <= max_lane; break;
    case Op::ShflXor: j = lane ^ bval; ok = j <= max_lane; break;
    default: j = min_lane | (bval & ~segmask); ok = j <= max_lane; break;
    }
    return ok ? j : lane;
}

uint64_t reduce_values(Op op, const Thread* lanes, unsigned mask) {
    uint32_t acc = 0;
    bool first = true;
    for (int l = 0; l < 32; ++l) {
        if (!(mask & lane_bit(l))) continue;
        uint32_t v = static_cast<uint32_t>(lanes[l].value);
        if (first) {
            acc = v;
            first = false;
            continue;
        }
        switch (op) {
        case Op::ReduceAdd: acc += v; break;
        case Op::ReduceMinU: acc = std::min(acc, v); break;
        case Op::ReduceMaxU: acc = std::max(acc, v); break;
        case Op::ReduceMinS: acc = static_cast<uint32_t>(std::min(static_cast<int32_t>(acc), static_cast<int32_t>(v))); break;
        case Op::ReduceMaxS: acc = static_cast<uint32_t>(std::max(static_cast<int32_t>(acc), static_cast<int32_t>(v))); break;
        case Op::ReduceAnd: acc &= v; break;
        case Op::ReduceOr: acc |= v; break;
        default: acc ^= v; break;
        }
    }
    return acc;
}

// All lanes of `mask` are waiting in the same collective: compute every lane's result.
void complete_collective(Thread* lanes, unsigned mask, Op op) {
    unsigned ballot = 0;
    for (int l = 0; l < 32; ++l)
        if ((mask & lane_bit(l)) && lanes[l].value) ballot |= lane_bit(l);
    uint64_t reduced = (op >= Op::ReduceAdd) ? reduce_values(op, lanes, mask) : 0;
    bool all_equal = true;
    int first = __builtin_ctz(mask);
    for (int l = 0; l < 32; ++l)
        if ((mask & lane_bit(l)) && lanes[l].value != lanes[first].value) all_equal = false;

    for (int l = 0; l < 32; ++l) {
        if (!(mask & lane_bit(l))) continue;
        Thread& t = lanes[l];
        t.pred = 0;
        switch (op) {
        case Op::ShflIdx: case Op::ShflUp: case Op::ShflDown: case Op::ShflXor: {
            int src = shfl_source(op, l, t.arg, t.width);
            // A source lane outside the mask has no defined value; we return the lane's own.
            t.result = (mask & lane_bit(src)) ? lanes[src].value : t.value;
            break;
        }
        case Op::Ballot: t.result = ballot; break;
        case Op::Any: t.result = ballot != 0; break;
        case Op::All: t.result = ballot == mask; break;
        case Op::SyncWarp: t.result = 0; break;
        case Op::MatchAny: {
            unsigned same = 0;
            for (int k = 0; k < 32; ++k)
                if ((mask & lane_bit(k)) && lanes[k].value == t.value) same |= lane_bit(k);
            t.result = same;
            break;
        }
        case Op::MatchAll:
            t.result = all_equal ? mask : 0;
            t.pred = all_equal;
            break;
        default: t.result = reduced; break;
        }
    }
    for (int l = 0; l < 32; ++l)
        if (mask & lane_bit(l)) make_runnable(lanes[l]);
}

[[noreturn]] void report_missing_lane(const Thread& waiter, int lane, bool exists) {
    Msg m;
    m.add("warp collective with lane %d missing from mask: in ", lane);
    add_kernel_block(m);
    m.add(", thread ");
    add_dim(m, waiter.idx);
    m.add(" (warp %d, lane %d) calls ", waiter.warp, waiter.lane);
    add_site(m, waiter);
    if (exists) {
        m.add(", but lane %d (thread ", lane);
        add_dim(m, warp_lanes(waiter.warp)[lane].idx);
        m.add(") has already exited, so it can never arrive (a GPU returns undefined values)");
    } else {
        m.add(", but the warp has no lane %d (the block has only %zu threads)", lane,
              g_block.threads.size());
    }
    size_t first = static_cast<size_t>(waiter.warp) * 32;
    add_thread_table(m, first, std::min(first + 32, g_block.threads.size()), true);
    die(m);
}

void check_mask_lanes(const Thread& t, const WarpState& w) {
    unsigned missing = t.mask & ~w.exists;
    if (missing) report_missing_lane(t, __builtin_ctz(missing), false);
    unsigned gone = t.mask & w.exited;
    if (gone) report_missing_lane(t, __builtin_ctz(gone), true);
}

// Completes the collective `t` waits in if every lane of its mask now waits in the same one.
void try_complete(Thread& t, WarpState& w) {
    if ((w.waiting & t.mask) != t.mask) return;
    Thread* lanes = warp_lanes(t.warp);
    for (int l = 0; l < 32; ++l) {
        if (!(t.mask & lane_bit(l))) continue;
        if (lanes[l].op != t.op || lanes[l].mask != t.mask) return;  // mismatch: may deadlock
    }
    w.waiting &= ~t.mask;
    complete_collective(lanes, t.mask, t.op);
}

}  // namespace

CollectiveResult warp_collective(const char* file, int line, Op op, unsigned mask, uint64_t value,
                                 int arg, int width) {
    Thread* t = current_thread(op_name(op));
    WarpState& w = g_block.warps[static_cast<size_t>(t->warp)];
    t->state = State::Warp;
    t->op = op;
    t->mask = mask;
    t->value = value;
    t->arg = arg;
    t->width = width;
    t->file = file;
    t->line = line;
    if (!(mask & lane_bit(t->lane))) {
        Msg m;
        m.add("%s with mask 0x%08x that does not include the calling lane %d ", op_name(op), mask, t->lane);
        add_where(m).add(" at %s:%d", base_name(file), line);
        die(m);
    }
    w.waiting |= lane_bit(t->lane);
    ++g_progress;
    check_mask_lanes(*t, w);
    try_complete(*t, w);
    suspend(t);
    return CollectiveResult{t->result, t->pred};
}

unsigned active_mask(const char* file, int line) {
    Thread* t = current_thread("__activemask");
    t->state = State::ActiveMask;
    t->file = file;
    t->line = line;
    ++g_progress;
    suspend(t);
    return static_cast<unsigned>(t->result);
}

void yield_thread() {
    if (!g_cur) return;
    make_runnable(*g_cur);
    suspend(g_cur);
}

long long device_clock() {
    static long long ticks = 0;
    ticks += 1000;
    return ticks + static_cast<long long>(g_switches) * 100;
}

void device_trap(const char* what) {
    Msg m;
    m.add("%s ", what);
    add_where(m);
    die(m);
}

namespace {

// A thread returned from the kernel: it no longer holds back barriers, but any warp partner
// still waiting for it in a collective can now never complete.
[[noreturn]] void thread_exit(Thread* t) {
    Block& b = g_block;
    WarpState& w = b.warps[static_cast<size_t>(t->warp)];
    t->state = State::Exited;
    --b.live;
    ++g_progress;
    w.exited |= lane_bit(t->lane);
    Thread* lanes = warp_lanes(t->warp);
    for (int l = 0; l < 32; ++l) {
        if ((w.waiting & lane_bit(l)) && (lanes[l].mask & lane_bit(t->lane)))
            report_missing_lane(lanes[l], t->lane, true);
    }
    if (b.at_barrier > 0 && b.at_barrier == b.live) release_barrier();
    context_switch(t->ctx, g_sched);
    __builtin_unreachable();
}

extern "C" void emu_thread_entry() {
    Thread* t = g_cur;
    g_launch->body.invoke(g_launch->body.closure);
    thread_exit(t);
}

void resume(Thread& t) {
    g_cur = &t;
    g_thread_idx = t.idx;
    ++g_switches;
    context_switch(g_sched, t.ctx);
    g_cur = nullptr;
}

// Once no thread can run, lanes waiting in __activemask() learn which lanes of their warp
// reached the same call: that is the set a converged warp would report.
bool resolve_active_masks() {
    bool any = false;
    for (size_t wi = 0; wi < g_block.warps.size(); ++wi) {
        Thread* lanes = warp_lanes(static_cast<int>(wi));
        unsigned pending = 0;
        for (int l = 0; l < 32; ++l)
            if ((g_block.warps[wi].exists & lane_bit(l)) && lanes[l].state == State::ActiveMask)
                pending |= lane_bit(l);
        while (pending) {
            const Thread& first = lanes[__builtin_ctz(pending)];
            unsigned group = 0;
            for (int l = 0; l < 32; ++l)
                if ((pending & lane_bit(l)) && lanes[l].line == first.line &&
                    strcmp(lanes[l].file, first.file) == 0)
                    group |= lane_bit(l);
            for (int l = 0; l < 32; ++l) {
                if (!(group & lane_bit(l))) continue;
                lanes[l].result = group;
                make_runnable(lanes[l]);
            }
            pending &= ~group;
            any = true;
        }
    }
    return any;
}

[[noreturn]] void report_deadlock() {
    Msg m;
    m.add("deadlock in ");
    add_kernel_block(m);
    m.add(": no thread can make progress (a GPU would hang or return garbage):");
    add_thread_table(m);
    die(m);
}

void run_block() {
    Block& b = g_block;
    const dim3 bd = g_block_dim;
    size_t n = static_cast<size_t>(bd.x) * bd.y * bd.z;
    b.threads.resize(n);
    b.warps.assign((n + 31) / 32, WarpState{0, 0, 0});
    b.queue.resize(n);
    b.head = b.count = 0;
    b.live = static_cast<int>(n);
    b.at_barrier = b.barrier_pred = 0;
    ++g_progress;
    for (size_t i = 0; i < n; ++i) {
        Thread& t = b.threads[i];
        t.idx = uint3{static_cast<unsigned>(i % bd.x), static_cast<unsigned>((i / bd.x) % bd.y),
                      static_cast<unsigned>(i / (static_cast<size_t>(bd.x) * bd.y))};
        t.linear = static_cast<int>(i);
        t.lane = static_cast<int>(i % 32);
        t.warp = static_cast<int>(i / 32);
        t.mask = 0;
        t.file = "";
        t.line = 0;
        context_init(t.ctx, stack_for(i), g_stack_size, emu_thread_entry);
        b.warps[i / 32].exists |= lane_bit(t.lane);
        make_runnable(t);
    }
    for (;;) {
        while (b.count > 0) resume(b.threads[static_cast<size_t>(b.pop())]);
        if (b.live == 0) return;
        if (resolve_active_masks()) continue;
        report_deadlock();
    }
}

// ---------------------------------------------------------------------------------------------
// Device memory. Each cudaMalloc gets its own mapping: a guard page, the data pages, and a guard
// page. The pointer handed out is placed so that the buffer ENDS exactly at the trailing guard,
// so even a one-byte overrun faults, whatever the size. The price: a buffer is only aligned to
// the largest power of two dividing its size (4-byte aligned for 1001 floats, 256-byte aligned
// for any multiple of 256 bytes); a real cudaMalloc always gives 256 bytes.
// ---------------------------------------------------------------------------------------------
struct Allocation {
    uintptr_t map, map_len, ptr, size;
    bool freed;
    bool managed;
};
std::map<uintptr_t, Allocation> g_allocs;  // keyed by mapping start
size_t g_device_bytes = 0;

const Allocation* find_mapping(uintptr_t addr) {
    auto it = g_allocs.upper_bound(addr);
    if (it == g_allocs.begin()) return nullptr;
    --it;
    const Allocation& a = it->second;
    return addr < a.map + a.map_len ? &a : nullptr;
}

// Dynamic shared memory gets the same treatment: its end abuts a guard page.
char* g_smem_region = nullptr;  // kMaxSmemOptin rounded up to pages, then the guard page
size_t g_smem_region_len = 0;
size_t g_smem_size = 0;

void* place_dynamic_smem(size_t size) {
    if (!g_smem_region) {
        g_smem_region_len = ((kMaxSmemOptin + kPage - 1) / kPage + 2) * kPage;
        void* p = mmap(nullptr, g_smem_region_len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) die(Msg().add("cannot map dynamic shared memory"));
        g_smem_region = static_cast<char*>(p);
        mprotect(g_smem_region, kPage, PROT_NONE);
        mprotect(g_smem_region + g_smem_region_len - kPage, kPage, PROT_NONE);
    }
    g_smem_size = size;
    return g_smem_region + g_smem_region_len - kPage - size;
}

// ---------------------------------------------------------------------------------------------
// Fault handling: SIGSEGV/SIGBUS name the buffer that was overrun and the CUDA thread that did
// it; the handler runs on its own stack so that a coroutine stack overflow is reported too.
// ---------------------------------------------------------------------------------------------
void describe_address(Msg& m, uintptr_t addr, bool is_write) {
#if defined(__x86_64__)
    const char* access = is_write ? "write" : "read";
#else
    const char* access = "access";
#endif
    if (in_stack_guard(addr)) {
        m.add("stack overflow of a CUDA thread (each has %zu KB; set MINISGL_EMU_STACK_KB to raise it) ",
              g_stack_size / 1024);
        return;
    }
    uintptr_t smem_end = reinterpret_cast<uintptr_t>(g_smem_region) + g_smem_region_len - kPage;
    if (g_smem_region && addr >= smem_end && addr < smem_end + kPage) {
        size_t past = static_cast<size_t>(addr - smem_end);
        Msg how;
        if (past == 0) how.add("just past the end");
        else how.add("%zu bytes past the end", past);
        m.add("out-of-bounds shared memory %s %s of the %zu bytes of dynamic shared memory ",
              access, how.text, g_smem_size);
        return;
    }
    if (g_smem_region && addr >= reinterpret_cast<uintptr_t>(g_smem_region) &&
        addr < reinterpret_cast<uintptr_t>(g_smem_region) + kPage) {
        m.add("out-of-bounds shared memory %s before the start of dynamic shared memory ", access);
        return;
    }
    if (const Allocation* a = find_mapping(addr)) {
        if (a->freed) {
            m.add("use after free: %s to a %zu-byte device buffer that was released by cudaFree ",
                  access, static_cast<size_t>(a->size));
        } else if (addr >= a->ptr + a->size) {
            size_t past = static_cast<size_t>(addr - (a->ptr + a->size));
            Msg how;
            if (past == 0) how.add("just past the end");
            else how.add("%zu bytes past the end", past);
            m.add("out-of-bounds %s %s of a %zu-byte cudaMalloc buffer (byte offset %zu) ", access,
                  how.text, static_cast<size_t>(a->size), static_cast<size_t>(addr - a->ptr));
        } else {
            m.add("out-of-bounds %s: %zu bytes before the start of a %zu-byte cudaMalloc buffer ",
                  access, static_cast<size_t>(a->ptr - addr), static_cast<size_t>(a->size));
        }
        return;
    }
    if (addr < 65536)
        m.add("invalid %s at address %#lx (a null pointer?) ", access, static_cast<unsigned long>(addr));
    else
        m.add("invalid memory %s at address %#lx ", access, static_cast<unsigned long>(addr));
}

void on_fault(int sig, siginfo_t* si, void* uctx) {
    Msg m;
    if (sig == SIGSEGV || sig == SIGBUS) {
        uintptr_t addr = reinterpret_cast<uintptr_t>(si->si_addr);
        bool is_write = false;
#if defined(__x86_64__)
        auto* uc = static_cast<ucontext_t*>(uctx);
        is_write = (uc->uc_mcontext.gregs[REG_ERR] & 2) != 0;
        if (sig == SIGSEGV && si->si_code == SI_KERNEL && addr == 0) {
            m.add("general protection fault (a misaligned vector access, e.g. a float4 load from an "
                  "address that is not 16-byte aligned?) ");
            add_where(m);
            die(m);
        }
#else
        (void)uctx;
#endif
        describe_address(m, addr, is_write);
    } else if (sig == SIGFPE) {
        m.add("arithmetic exception (integer division by zero?) ");
    } else if (sig == SIGILL) {
        m.add("illegal instruction ");
    } else if (sig == SIGABRT) {
        if (!g_in_kernel) {  // a host-side abort() or assert(): let it proceed as usual
            signal(SIGABRT, SIG_DFL);
            raise(SIGABRT);
            return;
        }
        m.add("device-side assert or abort ");
    }
    add_where(m);
    die(m);
}

// CPU-time watchdog: when no thread of the block reaches a barrier or collective or exits for a
// long time, some thread is most likely spin-waiting for another block, which never runs
// concurrently here (threads spinning on __nanosleep() switch a lot but make no progress either).
int g_spin_limit_s = 30;
int g_stuck_ticks = 0;
uint64_t g_seen_progress = 0;

void on_watchdog(int) {
    if (!g_in_kernel) return;
    if (g_progress != g_seen_progress) {
        g_seen_progress = g_progress;
        g_stuck_ticks = 0;
        return;
    }
    if (++g_stuck_ticks < g_spin_limit_s) return;
    Msg m;
    m.add("no CUDA thread reached a barrier or warp collective or exited for %d s of CPU time "
          "(an endless loop, or a spin-wait on another block: blocks run one at a time here; set "
          "MINISGL_EMU_SPIN_LIMIT_S to allow longer) ", g_spin_limit_s);
    add_where(m);
    die(m);
}

void arm_watchdog(bool on) {
    itimerval tv{};
    if (on) {
        tv.it_interval.tv_sec = 1;
        tv.it_value.tv_sec = 1;
        g_stuck_ticks = 0;
        g_seen_progress = g_progress;
    }
    setitimer(ITIMER_VIRTUAL, &tv, nullptr);
}

void at_exit_report() { write_report(0); }

__attribute__((constructor)) void init_runtime() {
    g_report_path = getenv("MINISGL_EMU_REPORT");
    if (const char* s = getenv("MINISGL_EMU_STACK_KB")) {
        long kb = atol(s);
        if (kb >= 16) g_stack_size = static_cast<size_t>(kb) * 1024;
    }
    if (const char* s = getenv("MINISGL_EMU_SPIN_LIMIT_S")) {
        int v = atoi(s);
        if (v > 0) g_spin_limit_s = v;
    }
    static char alt_stack[256 * 1024];
    stack_t ss{};
    ss.ss_sp = alt_stack;
    ss.ss_size = sizeof(alt_stack);
    sigaltstack(&ss, nullptr);
    struct sigaction sa {};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &sa, nullptr);
    struct sigaction wd {};
    wd.sa_handler = on_watchdog;
    wd.sa_flags = SA_RESTART | SA_ONSTACK;
    sigemptyset(&wd.sa_mask);
    sigaction(SIGVTALRM, &wd, nullptr);
    atexit(at_exit_report);
}

// ---------------------------------------------------------------------------------------------
// Launches.
// ---------------------------------------------------------------------------------------------
cudaError_t g_last_error = cudaSuccess;

cudaError_t record(cudaError_t e) {
    if (e != cudaSuccess) g_last_error = e;
    return e;
}

struct FuncAttrs {
    int max_dynamic_smem = static_cast<int>(kDefaultSmem);
};
std::map<std::string, FuncAttrs> g_func_attrs;

int g_cuda_version = 13000;

// CUDA 12 reported a bad grid or block shape as cudaErrorInvalidConfiguration ("invalid
// configuration argument"); CUDA 13 reports cudaErrorInvalidValue ("invalid argument"), as seen on
// an H200 with CUDA 13.0.
cudaError_t bad_shape() {
    return g_cuda_version >= 13000 ? cudaErrorInvalidValue : cudaErrorInvalidConfiguration;
}

cudaError_t check_launch(const LaunchConfig& c, const char* name) {
    const dim3 g = c.grid, b = c.block;
    if (g.x == 0 || g.y == 0 || g.z == 0 || b.x == 0 || b.y == 0 || b.z == 0) return bad_shape();
    if (b.x > 1024 || b.y > 1024 || b.z > 64 || static_cast<uint64_t>(b.x) * b.y * b.z > 1024)
        return bad_shape();
    if (g.x > 2147483647u || g.y > 65535u || g.z > 65535u) return bad_shape();
    if (c.smem > static_cast<size_t>(func_max_dynamic_smem(name))) return cudaErrorInvalidValue;
    return cudaSuccess;
}

}  // namespace

int register_cuda_version(int version) {
    g_cuda_version = version;
    return version;
}

int func_max_dynamic_smem(const char* name) {
    auto it = g_func_attrs.find(name);
    return it == g_func_attrs.end() ? static_cast<int>(kDefaultSmem) : it->second.max_dynamic_smem;
}

cudaError_t func_set_attribute(const char* name, cudaFuncAttribute attr, int value) {
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || static_cast<size_t>(value) > kMaxSmemOptin) return record(cudaErrorInvalidValue);
        g_func_attrs[name].max_dynamic_smem = value;
    }
    return cudaSuccess;
}

void run_kernel(const LaunchConfig& config, const char* name, KernelBody body) {
    if (g_in_kernel) {
        Msg m;
        m.add("kernel `%s` launched from device code (dynamic parallelism is not emulated) ", name);
        add_where(m);
        die(m);
    }
    cudaError_t err = check_launch(config, name);
    if (err != cudaSuccess) {
        record(err);
        return;
    }
    Launch launch{name, config, body};
    g_launch = &launch;
    g_grid_dim = config.grid;
    g_block_dim = config.block;
    g_dyn_smem = place_dynamic_smem(config.smem);
    g_in_kernel = true;
    arm_watchdog(true);
    const dim3 g = config.grid;
    for (unsigned z = 0; z < g.z; ++z)
        for (unsigned y = 0; y < g.y; ++y)
            for (unsigned x = 0; x < g.x; ++x) {
                g_block_idx = uint3{x, y, z};
                run_block();
            }
    arm_watchdog(false);
    g_in_kernel = false;
    g_launch = nullptr;
    ++g_kernels_run;
}

}  // namespace emu

// =============================================================================================
// The CUDA runtime API.
// =============================================================================================
using emu::record;

namespace {

// Checks [p, p + n) against device allocations: a range that starts in a buffer but runs past
// its end is a fatal error (a GPU may silently corrupt a neighbour); a pointer that is not in
// any buffer is reported as cudaErrorInvalidValue, as CUDA does.
cudaError_t check_device_range(const void* p, size_t n, const char* api, const char* role) {
    if (n == 0) return cudaSuccess;
    uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const emu::Allocation* al = emu::find_mapping(a);
    if (!al) return cudaErrorInvalidValue;
    emu::Msg m;
    if (al->freed) {
        m.add("%s: the %s pointer refers to a %zu-byte device buffer already released by cudaFree",
              api, role, static_cast<size_t>(al->size));
        emu::die(m);
    }
    if (a < al->ptr || a + n > al->ptr + al->size) {
        size_t over = static_cast<size_t>(a + n - (al->ptr + al->size));
        m.add("%s: %zu bytes at offset %ld of the %s buffer overrun its %zu bytes by %zu byte%s", api,
              n, static_cast<long>(a - al->ptr), role, static_cast<size_t>(al->size), over,
              over == 1 ? "" : "s");
        emu::die(m);
    }
    return cudaSuccess;
}

bool is_device_pointer(const void* p) {
    const emu::Allocation* al = emu::find_mapping(reinterpret_cast<uintptr_t>(p));
    return al && !al->freed;
}

cudaError_t check_copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, const char* api) {
    bool dst_dev = false, src_dev = false;
    switch (kind) {
    case cudaMemcpyHostToHost: break;
    case cudaMemcpyHostToDevice: dst_dev = true; break;
    case cudaMemcpyDeviceToHost: src_dev = true; break;
    case cudaMemcpyDeviceToDevice: dst_dev = src_dev = true; break;
    case cudaMemcpyDefault:
        dst_dev = is_device_pointer(dst);
        src_dev = is_device_pointer(src);
        break;
    default: return cudaErrorInvalidMemcpyDirection;
    }
    if (dst_dev) {
        cudaError_t e = check_device_range(dst, n, api, "destination");
        if (e != cudaSuccess) return e;
    }
    if (src_dev) {
        cudaError_t e = check_device_range(src, n, api, "source");
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

cudaError_t device_alloc(void** ptr, size_t size, bool managed) {
    if (!ptr) return record(cudaErrorInvalidValue);
    *ptr = nullptr;
    if (size == 0) return cudaSuccess;
    if (size > emu::kDeviceMemory || emu::g_device_bytes + size > emu::kDeviceMemory)
        return record(cudaErrorMemoryAllocation);
    size_t pages = (size + emu::kPage - 1) / emu::kPage;
    size_t len = (pages + 2) * emu::kPage;
    void* m = mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return record(cudaErrorMemoryAllocation);
    char* base = static_cast<char*>(m);
    if (mprotect(base + emu::kPage, pages * emu::kPage, PROT_READ | PROT_WRITE) != 0) {
        munmap(m, len);
        return record(cudaErrorMemoryAllocation);
    }
    uintptr_t data_end = reinterpret_cast<uintptr_t>(base) + (pages + 1) * emu::kPage;
    emu::Allocation a{reinterpret_cast<uintptr_t>(base), len, data_end - size, size, false, managed};
    emu::g_allocs[a.map] = a;
    emu::g_device_bytes += size;
    *ptr = reinterpret_cast<void*>(a.ptr);
    return cudaSuccess;
}

double now_ms() {
    using namespace std::chrono;
    return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace

struct CUstream_st {
    unsigned flags;
};
struct CUevent_st {
    unsigned flags;
    bool recorded;
    double ms;
};

cudaError_t cudaMalloc(void** ptr, size_t size) { return device_alloc(ptr, size, false); }
cudaError_t cudaMallocManaged(void** ptr, size_t size, unsigned int) { return device_alloc(ptr, size, true); }

cudaError_t cudaFree(void* ptr) {
    if (!ptr) return cudaSuccess;
    auto* a = const_cast<emu::Allocation*>(emu::find_mapping(reinterpret_cast<uintptr_t>(ptr)));
    if (!a || a->ptr != reinterpret_cast<uintptr_t>(ptr)) return record(cudaErrorInvalidValue);
    if (a->freed) {
        emu::Msg m;
        m.add("cudaFree of a %zu-byte device buffer that was already freed (double free)",
              static_cast<size_t>(a->size));
        emu::die(m);
    }
    // Keep the address range reserved (PROT_NONE) so that later uses of the pointer fault and
    // are reported as use-after-free; mapping it afresh also gives the memory back.
    mmap(reinterpret_cast<void*>(a->map), a->map_len, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    a->freed = true;
    emu::g_device_bytes -= a->size;
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
    if (!ptr) return record(cudaErrorInvalidValue);
    *ptr = nullptr;
    if (size == 0) return cudaSuccess;
    if (posix_memalign(ptr, 256, size) != 0) return record(cudaErrorMemoryAllocation);
    return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int) { return cudaMallocHost(ptr, size); }
cudaError_t cudaFreeHost(void* ptr) {
    free(ptr);
    return cudaSuccess;
}
cudaError_t cudaHostRegister(void*, size_t, unsigned int) { return cudaSuccess; }
cudaError_t cudaHostUnregister(void*) { return cudaSuccess; }

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
    cudaError_t e = check_copy(dst, src, count, kind, "cudaMemcpy");
    if (e != cudaSuccess) return record(e);
    if (count) std::memmove(dst, src, count);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t) {
    cudaError_t e = check_copy(dst, src, count, kind, "cudaMemcpyAsync");
    if (e != cudaSuccess) return record(e);
    if (count) std::memmove(dst, src, count);
    return cudaSuccess;
}
cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                         size_t height, cudaMemcpyKind kind) {
    if (width > dpitch || width > spitch) return record(cudaErrorInvalidPitchValue);
    for (size_t r = 0; r < height; ++r) {
        cudaError_t e = cudaMemcpy(static_cast<char*>(dst) + r * dpitch,
                                   static_cast<const char*>(src) + r * spitch, width, kind);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                              size_t height, cudaMemcpyKind kind, cudaStream_t) {
    return cudaMemcpy2D(dst, dpitch, src, spitch, width, height, kind);
}
cudaError_t cudaMemset(void* ptr, int value, size_t count) {
    cudaError_t e = check_device_range(ptr, count, "cudaMemset", "destination");
    if (e != cudaSuccess) return record(e);
    if (count) std::memset(ptr, value, count);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t) {
    return cudaMemset(ptr, value, count);
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
    if (free_bytes) *free_bytes = emu::kDeviceMemory - emu::g_device_bytes;
    if (total_bytes) *total_bytes = emu::kDeviceMemory;
    return cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* ptr) {
    if (!attr) return record(cudaErrorInvalidValue);
    const emu::Allocation* a = emu::find_mapping(reinterpret_cast<uintptr_t>(ptr));
    bool dev = a && !a->freed;
    attr->type = dev ? (a->managed ? cudaMemoryTypeManaged : cudaMemoryTypeDevice) : cudaMemoryTypeUnregistered;
    attr->device = 0;
    attr->devicePointer = dev ? const_cast<void*>(ptr) : nullptr;
    attr->hostPointer = dev && !a->managed ? nullptr : const_cast<void*>(ptr);
    return cudaSuccess;
}

// Streams and events: work runs at submission, so every stream is always idle.
cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
    if (!s) return record(cudaErrorInvalidValue);
    *s = new CUstream_st{flags};
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned int flags, int) {
    return cudaStreamCreateWithFlags(s, flags);
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (s == cudaStreamLegacy || s == cudaStreamPerThread) return record(cudaErrorInvalidResourceHandle);
    delete s;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t e, unsigned int) {
    return e ? cudaSuccess : record(cudaErrorInvalidResourceHandle);
}
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
    if (!e) return record(cudaErrorInvalidValue);
    *e = new CUevent_st{flags, false, 0.0};
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
    if (!e) return record(cudaErrorInvalidResourceHandle);
    e->recorded = true;
    e->ms = now_ms();
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    return e ? cudaSuccess : record(cudaErrorInvalidResourceHandle);
}
cudaError_t cudaEventQuery(cudaEvent_t e) { return e ? cudaSuccess : record(cudaErrorInvalidResourceHandle); }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    if (!ms) return record(cudaErrorInvalidValue);
    if (!start || !end) return record(cudaErrorInvalidResourceHandle);
    if ((start->flags | end->flags) & cudaEventDisableTiming) return record(cudaErrorInvalidResourceHandle);
    if (!start->recorded || !end->recorded) return record(cudaErrorInvalidResourceHandle);
    *ms = static_cast<float>(end->ms - start->ms);
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    delete e;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
cudaError_t cudaThreadSynchronize() { return cudaSuccess; }
cudaError_t cudaDeviceReset() { return cudaSuccess; }
cudaError_t cudaGetLastError() {
    cudaError_t e = emu::g_last_error;
    emu::g_last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError() { return emu::g_last_error; }

namespace {
struct ErrorText {
    cudaError_t code;
    const char* name;
    const char* text;
};
const ErrorText kErrorTexts[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorCudartUnloading, "cudaErrorCudartUnloading", "driver shutting down"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {cudaErrorInvalidPitchValue, "cudaErrorInvalidPitchValue", "invalid pitch argument"},
    {cudaErrorInvalidSymbol, "cudaErrorInvalidSymbol", "invalid device symbol"},
    {cudaErrorInvalidHostPointer, "cudaErrorInvalidHostPointer", "invalid host pointer"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver", "CUDA driver version is insufficient for CUDA runtime version"},
    {cudaErrorInvalidDeviceFunction, "cudaErrorInvalidDeviceFunction", "invalid device function"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidKernelImage, "cudaErrorInvalidKernelImage", "device kernel image is invalid"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorIllegalState, "cudaErrorIllegalState", "the operation cannot be performed in the present state"},
    {cudaErrorNotFound, "cudaErrorNotFound", "named symbol not found"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress", "an illegal memory access was encountered"},
    {cudaErrorLaunchOutOfResources, "cudaErrorLaunchOutOfResources", "too many resources requested for launch"},
    {cudaErrorLaunchTimeout, "cudaErrorLaunchTimeout", "the launch timed out and was terminated"},
    {cudaErrorAssert, "cudaErrorAssert", "device-side assert triggered"},
    {cudaErrorHardwareStackError, "cudaErrorHardwareStackError", "hardware stack error"},
    {cudaErrorIllegalInstruction, "cudaErrorIllegalInstruction", "an illegal instruction was encountered"},
    {cudaErrorMisalignedAddress, "cudaErrorMisalignedAddress", "misaligned address"},
    {cudaErrorInvalidAddressSpace, "cudaErrorInvalidAddressSpace", "operation not supported on global/shared address space"},
    {cudaErrorInvalidPc, "cudaErrorInvalidPc", "invalid program counter"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {cudaErrorNotPermitted, "cudaErrorNotPermitted", "operation not permitted"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error"},
};
const ErrorText* find_error(cudaError_t e) {
    for (const ErrorText& t : kErrorTexts)
        if (t.code == e) return &t;
    return nullptr;
}
}  // namespace

const char* cudaGetErrorString(cudaError_t e) {
    const ErrorText* t = find_error(e);
    return t ? t->text : "unrecognized error code";
}
const char* cudaGetErrorName(cudaError_t e) {
    const ErrorText* t = find_error(e);
    return t ? t->name : "cudaErrorUnknown";
}

cudaError_t cudaGetDeviceCount(int* count) {
    if (!count) return record(cudaErrorInvalidValue);
    *count = 1;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
    if (!device) return record(cudaErrorInvalidValue);
    *device = 0;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : record(cudaErrorInvalidDevice); }
cudaError_t cudaSetDeviceFlags(unsigned int) { return cudaSuccess; }

// Plausible values of an H200 (SXM): compute capability 9.0, 132 SMs.
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
    if (!p) return record(cudaErrorInvalidValue);
    if (device != 0) return record(cudaErrorInvalidDevice);
    std::memset(p, 0, sizeof(*p));
    std::snprintf(p->name, sizeof(p->name), "NVIDIA H200 (minisgl CPU emulator)");
    p->totalGlobalMem = emu::kDeviceMemory;
    p->sharedMemPerBlock = emu::kDefaultSmem;
    p->regsPerBlock = 65536;
    p->warpSize = 32;
    p->memPitch = 2147483647;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = 1024;
    p->maxThreadsDim[1] = 1024;
    p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647;
    p->maxGridSize[1] = 65535;
    p->maxGridSize[2] = 65535;
    p->totalConstMem = 65536;
    p->major = 9;
    p->minor = 0;
    p->textureAlignment = 512;
    p->texturePitchAlignment = 32;
    p->deviceOverlap = 1;
    p->multiProcessorCount = 132;
    p->canMapHostMemory = 1;
    p->concurrentKernels = 1;
    p->ECCEnabled = 1;
    p->asyncEngineCount = 3;
    p->unifiedAddressing = 1;
    p->memoryBusWidth = 6144;
    p->l2CacheSize = 62914560;
    p->persistingL2CacheMaxSize = 82837504;
    p->maxThreadsPerMultiProcessor = 2048;
    p->streamPrioritiesSupported = 1;
    p->globalL1CacheSupported = 1;
    p->localL1CacheSupported = 1;
    p->sharedMemPerMultiprocessor = 233472;
    p->regsPerMultiprocessor = 65536;
    p->managedMemory = 1;
    p->concurrentManagedAccess = 1;
    p->computePreemptionSupported = 1;
    p->cooperativeLaunch = 1;
    p->sharedMemPerBlockOptin = emu::kMaxSmemOptin;
    p->maxBlocksPerMultiProcessor = 32;
    p->accessPolicyMaxWindowSize = 134213632;
    p->reservedSharedMemPerBlock = 1024;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
    if (!value) return record(cudaErrorInvalidValue);
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, device);
    if (e != cudaSuccess) return e;
    switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxBlockDimX: *value = p.maxThreadsDim[0]; break;
    case cudaDevAttrMaxBlockDimY: *value = p.maxThreadsDim[1]; break;
    case cudaDevAttrMaxBlockDimZ: *value = p.maxThreadsDim[2]; break;
    case cudaDevAttrMaxGridDimX: *value = p.maxGridSize[0]; break;
    case cudaDevAttrMaxGridDimY: *value = p.maxGridSize[1]; break;
    case cudaDevAttrMaxGridDimZ: *value = p.maxGridSize[2]; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = static_cast<int>(p.sharedMemPerBlock); break;
    case cudaDevAttrTotalConstantMemory: *value = static_cast<int>(p.totalConstMem); break;
    case cudaDevAttrWarpSize: *value = p.warpSize; break;
    case cudaDevAttrMaxRegistersPerBlock: *value = p.regsPerBlock; break;
    case cudaDevAttrClockRate: *value = 1980000; break;
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
    case cudaDevAttrMemoryClockRate: *value = 3201000; break;
    case cudaDevAttrGlobalMemoryBusWidth: *value = p.memoryBusWidth; break;
    case cudaDevAttrL2CacheSize: *value = p.l2CacheSize; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = p.maxThreadsPerMultiProcessor; break;
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = static_cast<int>(p.sharedMemPerMultiprocessor); break;
    case cudaDevAttrMaxRegistersPerMultiprocessor: *value = p.regsPerMultiprocessor; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = static_cast<int>(p.sharedMemPerBlockOptin); break;
    case cudaDevAttrMaxBlocksPerMultiprocessor: *value = p.maxBlocksPerMultiProcessor; break;
    case cudaDevAttrUnifiedAddressing: case cudaDevAttrConcurrentKernels: case cudaDevAttrManagedMemory:
    case cudaDevAttrCooperativeLaunch: case cudaDevAttrCanMapHostMemory: case cudaDevAttrGpuOverlap:
    case cudaDevAttrEccEnabled: *value = 1; break;
    case cudaDevAttrAsyncEngineCount: *value = p.asyncEngineCount; break;
    default: *value = 0; break;
    }
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* v) {
    if (!v) return record(cudaErrorInvalidValue);
    *v = emu::g_cuda_version;
    return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) { return cudaDriverGetVersion(v); }
