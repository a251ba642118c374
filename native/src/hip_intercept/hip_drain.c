/*
 * What the HIP library's drain waits for (drain.c runs it on its worker
 * thread): device completion. HIP has no context stack to push: each device
 * this process submitted work on is made current on the worker thread and
 * synchronised (hipDeviceSynchronize waits for every stream of the device).
 *
 * Region entry has already waited for the in-flight counter to reach zero
 * (in_perturbing in the gate entry: no thread of the tenant inside a
 * submitting call, krex_gate.h) before it asks for a drain, so everything the
 * tenant will have submitted is on a device queue when the drain starts. The
 * devices are noted after each gated call that passed the gate (the calling
 * thread's current device) and published in the gate entry's `contexts`.
 */
#include <pthread.h>

#include "hip_intercept.h"

#define MAX_DEVICES 64

typedef hipError_t (*get_device_fn)(int *);
typedef hipError_t (*set_device_fn)(int);
typedef hipError_t (*sync_fn)(void);
typedef hipError_t (*capture_mode_fn)(hipStreamCaptureMode *);

static get_device_fn real_get_device;
static pthread_mutex_t device_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t used; /* bit d: device d had work submitted */
static KREX_TLS int last_device = -1;

void krex_drain_publish(struct krex_gate_proc *e)
{
    pthread_mutex_lock(&device_lock);
    krex_drain_publish_count(e, (unsigned)__builtin_popcountll(used));
    pthread_mutex_unlock(&device_lock);
}

void krex_drain_note_context(void)
{
    get_device_fn get = __atomic_load_n(&real_get_device, __ATOMIC_ACQUIRE);
    if (get == NULL) {
        get = (get_device_fn)krex_driver_symbol("hipGetDevice");
        if (get == NULL)
            return;
        __atomic_store_n(&real_get_device, get, __ATOMIC_RELEASE);
    }
    int d = -1;
    krex_depth++; /* hipGetDevice may initialise HIP: never through our wrappers */
    hipError_t r = get(&d);
    krex_depth--;
    if (r != hipSuccess || d < 0 || d >= MAX_DEVICES || d == last_device)
        return;
    last_device = d;
    pthread_mutex_lock(&device_lock);
    used |= 1ull << d;
    krex_drain_publish_everywhere((unsigned)__builtin_popcountll(used));
    pthread_mutex_unlock(&device_lock);
}

void krex_drain_worker_init(void)
{
    capture_mode_fn exchange = (capture_mode_fn)krex_driver_symbol("hipThreadExchangeStreamCaptureMode");
    if (exchange != NULL) {
        hipStreamCaptureMode mode = hipStreamCaptureModeRelaxed;
        exchange(&mode);
    }
}

uint32_t krex_drain_sync_all(void)
{
    set_device_fn set = (set_device_fn)krex_driver_symbol("hipSetDevice");
    sync_fn sync = (sync_fn)krex_driver_symbol("hipDeviceSynchronize");
    if (set == NULL || sync == NULL)
        return KREX_DRAIN_ERROR;
    pthread_mutex_lock(&device_lock);
    uint64_t todo = used;
    pthread_mutex_unlock(&device_lock);
    uint32_t result = KREX_DRAIN_OK;
    for (int d = 0; d < MAX_DEVICES; d++) {
        if (!(todo >> d & 1))
            continue;
        hipError_t r = set(d);
        if (r == hipSuccess)
            r = sync();
        if (r != hipSuccess)
            result = KREX_DRAIN_ERROR;
    }
    return result;
}

void krex_drain_vendor_after_fork(void)
{
    pthread_mutex_init(&device_lock, NULL);
    used = 0;
    last_device = -1;
}
