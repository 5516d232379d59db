/* timeline.c — what the trainer measured: the last step's timeline
 * (--trace) and per-node times (--profile), written in the formats mpcc
 * reads and Perfetto opens. The devices' runtime (stream.c for CPU devices,
 * cuda.c for CUDA devices) fills mprt_op_start/end and the node times.
 */
#include "mprt.h"
#include "program.h"

#include <time.h>

MPRT_GLOBAL int mprt_tracing;               /* record op times by label */
MPRT_GLOBAL double *mprt_op_start, *mprt_op_end;
MPRT_GLOBAL double mprt_clock0;

MPRT_KERNEL double mprt_clock(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9 - mprt_clock0;
}

/* ---- the measured timeline ---- */

/* Writes the last traced step in Chrome trace format, as mpcc --trace
 * writes the predicted one: a process per device, a thread per stream,
 * complete events, flow arrows for copies, a memory counter per device,
 * and in "otherData" the schedule, its micro-batches and the run's mean
 * step (what mpcc --measured marks on --dump=sweep). */
MPRT_KERNEL int mprt_write_trace(const char *path, const MprtOpInfo *ops, int nops,
                                 const char *const *devices, const size_t *arena_bytes,
                                 int ndev, const MprtRunInfo *run, char *err, size_t errlen)
{
    static const char *const kinds[] = {"compute", "send", "send-back", "comm"};
    MprtOut out;
    if (mprt_out_open(&out, path, err, errlen) != 0)
        return 1;
    double t0 = 1e300;
    for (int i = 0; i < nops; i++)
        if (mprt_op_start[i] < t0)
            t0 = mprt_op_start[i];
    fprintf(out.fp, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
    for (int d = 0; d < ndev; d++) {
        fprintf(out.fp, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":"
                "{\"name\":\"%s\"}},\n", d, devices[d]);
        for (int k = 0; k < MPRT_STREAMS; k++)
            fprintf(out.fp, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                    "\"args\":{\"name\":\"%s\"}},\n", d, k, kinds[k]);
        fprintf(out.fp, "{\"name\":\"memory\",\"ph\":\"C\",\"pid\":%d,\"ts\":0,\"args\":"
                "{\"bytes\":%zu}},\n", d, arena_bytes[d]);
    }
    for (int i = 0; i < nops; i++) {
        double ts = (mprt_op_start[i] - t0) * 1e6, te = (mprt_op_end[i] - t0) * 1e6;
        int pid = ops[i].stream / MPRT_STREAMS, tid = ops[i].stream % MPRT_STREAMS;
        fprintf(out.fp, "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
                "\"ts\":%.3f,\"dur\":%.3f},\n", ops[i].name, ops[i].dst_dev < 0 ? "compute" :
                "copy", pid, tid, ts, te - ts);
        if (ops[i].dst_dev >= 0)
            fprintf(out.fp, "{\"name\":\"copy\",\"cat\":\"copy\",\"ph\":\"s\",\"id\":%d,"
                    "\"pid\":%d,\"tid\":%d,\"ts\":%.3f},\n{\"name\":\"copy\",\"cat\":\"copy\","
                    "\"ph\":\"f\",\"bp\":\"e\",\"id\":%d,\"pid\":%d,\"tid\":0,\"ts\":%.3f},\n",
                    i, pid, tid, ts, i, ops[i].dst_dev, te);
    }
    fprintf(out.fp, "{\"name\":\"step\",\"ph\":\"i\",\"s\":\"g\",\"pid\":0,\"tid\":0,\"ts\":0}\n],\n"
            "\"otherData\":{\"source\":\"measured\",\"schedule\":\"%s\",\"microbatches\":%d,"
            "\"mean_step_ms\":%.6f,\"steps\":%ld}}\n", run->schedule, run->microbatches,
            run->mean_step * 1e3, run->steps);
    return mprt_out_commit(&out, err, errlen);
}

/* ---- per-node times (--profile) ---- */

MPRT_GLOBAL int mprt_profiling;
MPRT_GLOBAL double *mprt_node_seconds;
MPRT_GLOBAL long *mprt_node_calls;

MPRT_GLOBAL const MprtProfNode *mprt_prof_nodes;   /* the program's nodes, by index */

/* A stage action marks where each node it times starts (mprt_prof_node)
 * and where its last one ends (mprt_prof_end): a node's time runs from its
 * mark to the next, on the thread issuing the action (a CPU stream's
 * worker, or the host for CUDA devices). */
MPRT_GLOBAL _Thread_local int mprt_prof_open = -1;   /* the node being timed, or -1 */
MPRT_GLOBAL _Thread_local double mprt_prof_t0;       /* since when */

MPRT_KERNEL void mprt_prof_end(void)
{
    if (mprt_prof_open >= 0) {
        mprt_node_seconds[mprt_prof_open] += mprt_clock() - mprt_prof_t0;
        mprt_node_calls[mprt_prof_open]++;
        mprt_prof_open = -1;
    }
}

MPRT_KERNEL void mprt_prof_node(int k)
{
    mprt_prof_end();
    if (mprt_profiling)
        mprt_prof_open = k, mprt_prof_t0 = mprt_clock();
}

/* Mean seconds per call of every node that ran while profiling, and the
 * rows of the micro-batch they ran on, as mpcc --measured reads them. */
MPRT_KERNEL int mprt_write_profile(const char *path, const char *model_file, long rows,
                                   const MprtProfNode *nodes, int n, char *err, size_t errlen)
{
    MprtOut out;
    if (mprt_out_open(&out, path, err, errlen) != 0)
        return 1;
    fprintf(out.fp, "{\"format\": \"mpcc-profile\", \"model\": ");
    mprt_json_fputs(out.fp, model_file);
    fprintf(out.fp, ", \"rows\": %ld,\n \"nodes\": [", rows);
    int first = 1;
    for (int k = 0; k < n; k++) {
        if (!mprt_node_calls[k])
            continue;
        fprintf(out.fp, "%s\n  {\"name\": ", first ? "" : ",");
        mprt_json_fputs(out.fp, nodes[k].name);
        fprintf(out.fp, ", \"phase\": \"%s\", \"seconds\": %.9g, \"calls\": %ld}", nodes[k].phase,
                mprt_node_seconds[k] / (double)mprt_node_calls[k], mprt_node_calls[k]);
        first = 0;
    }
    fprintf(out.fp, "\n]}\n");
    return mprt_out_commit(&out, err, errlen);
}
