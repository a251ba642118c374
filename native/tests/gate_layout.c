/* Prints the layout of krex_gate.h as "struct.field offset size" lines, so a
 * test can compare it with the Python mirror (krex_runtime/regions/gate/core.py). */
#include <stddef.h>
#include <stdio.h>

#include "krex_gate.h"

#define H(f) printf("header.%s %zu %zu\n", #f, offsetof(struct krex_gate_header, f), sizeof(((struct krex_gate_header *)0)->f))
#define P(f) printf("proc.%s %zu %zu\n", #f, offsetof(struct krex_gate_proc, f), sizeof(((struct krex_gate_proc *)0)->f))

int main(void)
{
    printf("sizeof.header %zu 0\n", sizeof(struct krex_gate_header));
    printf("sizeof.proc %zu 0\n", sizeof(struct krex_gate_proc));
    printf("const.magic %llu 0\n", (unsigned long long)KREX_GATE_MAGIC);
    printf("const.version %u 0\n", KREX_GATE_VERSION);
    printf("const.max_procs %u 0\n", KREX_GATE_MAX_PROCS);
    printf("const.class_count %d 0\n", KREX_CLASS_COUNT);
    printf("const.class_slots %d 0\n", KREX_CLASS_SLOTS);
    printf("const.class_perturbing %u 0\n", KREX_CLASS_PERTURBING);
    printf("const.closed %u 0\n", KREX_GATE_CLOSED);
    printf("const.no_holder %d 0\n", KREX_GATE_NO_HOLDER);
    printf("const.default_stale_ns %llu 0\n", KREX_GATE_DEFAULT_STALE_NS);
    printf("const.default_drain_timeout_ns %llu 0\n", KREX_GATE_DEFAULT_DRAIN_TIMEOUT_NS);
    H(magic); H(version); H(header_size); H(proc_size); H(max_procs); H(procs_offset);
    H(gate_word); H(holder); H(generation); H(heartbeat_ns); H(stale_after_ns);
    H(park_wait_ns); H(spin_ns); H(drain_timeout_ns); H(runtime_pid); H(closed_at_ns); H(opened_at_ns); H(closed_classes);
    P(state); P(pid); P(tenant_id); P(start_time); P(in_call); P(parked); P(drain_req);
    P(drain_ack); P(drain_result); P(uses_cuda); P(contexts); P(fail_open); P(calls_total);
    P(parks_total); P(drains_total); P(calls); P(drain_ack_ns); P(in_perturbing); P(in_class);
    return 0;
}
