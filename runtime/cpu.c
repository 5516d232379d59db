/* cpu.c — the CPU device's kernels, forward and backward, float32.
 *
 * The generated step calls these with the model's static shapes as
 * literals. GEMM and convolution go through BLAS (cblas_sgemm; convolution
 * as im2col + GEMM). Reductions accumulate in double where PyTorch's own
 * results depend on it (losses, normalization statistics).
 */
#include "mprt.h"

#include <cblas.h>
#include <math.h>

/* Training (1) or inference (0). Kernels whose behaviour depends on the
 * mode read this flag: BatchNormalization normalises with the batch's
 * statistics and updates the running ones in training, and with the
 * running statistics, left as they are, in inference; Dropout is the
 * identity in inference. The trainer's evaluation (train.c) clears it
 * around its forward passes. It is the runtime's one piece of mutable
 * global state besides the arena. */
static int mprt_training = 1;

/* A program uses only the kernels its model needs. */
#if defined(__GNUC__) || defined(__clang__)
#define MPRT_KERNEL static __attribute__((unused))
#else
#define MPRT_KERNEL static
#endif

/* ---- matrix multiply ---- */

/* Y[M,N] = alpha * op(A) op(B) + beta * C, with C broadcast from
 * c_rows x c_cols (1 or M, 1 or N), or absent. */
MPRT_KERNEL void mprt_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A,
                      const float *B, float beta, const float *C, int c_rows, int c_cols,
                      float *Y)
{
    float b = 0.0f;
    if (C && beta != 0.0f) {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++)
                Y[(size_t)i * N + j] = C[(size_t)(c_rows == 1 ? 0 : i) * c_cols +
                                         (c_cols == 1 ? 0 : j)];
        b = beta;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                M, N, K, alpha, A, ta ? M : K, B, tb ? K : N, b, Y, N);
}

/* Batched Y[b] = A[b] @ B[b] with broadcast batch strides (0 = shared). */
MPRT_KERNEL void mprt_matmul(int batch, int M, int N, int K, const float *A, long sa,
                        const float *B, long sb, float *Y)
{
    for (int i = 0; i < batch; i++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f,
                    A + i * sa, K, B + i * sb, N, 0.0f, Y + (size_t)i * M * N, N);
}

/* ---- elementwise ---- */

MPRT_KERNEL void mprt_relu(long n, const float *x, float *y)
{
    for (long i = 0; i < n; i++)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

MPRT_KERNEL void mprt_relu_grad(long n, const float *dy, const float *y, float *dx)
{
    for (long i = 0; i < n; i++)
        dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

MPRT_KERNEL void mprt_copy(long n, const float *x, float *y)
{
    if (x != y)
        memcpy(y, x, (size_t)n * sizeof *y);
}

/* y = sum of k inputs of n elements */
MPRT_KERNEL void mprt_sum(long n, int k, const float *const *x, float *y)
{
    for (long i = 0; i < n; i++) {
        float s = x[0][i];
        for (int j = 1; j < k; j++)
            s += x[j][i];
        y[i] = s;
    }
}

/* Broadcasting binary op over an output of `rank` dims; sa/sb are the
 * inputs' strides per output dimension (0 where broadcast). */
enum { MPRT_ADD, MPRT_SUB, MPRT_MUL, MPRT_DIV, MPRT_POW };

MPRT_KERNEL void mprt_binary(int op, int rank, const long *shape, const float *a, const long *sa,
                        const float *b, const long *sb, float *y)
{
    long n = 1, idx[8] = {0};
    for (int d = 0; d < rank; d++)
        n *= shape[d];
    long ia = 0, ib = 0;
    for (long i = 0; i < n; i++) {
        float u = a[ia], v = b[ib];
        y[i] = op == MPRT_ADD ? u + v : op == MPRT_SUB ? u - v : op == MPRT_MUL ? u * v
             : op == MPRT_DIV ? u / v : powf(u, v);
        for (int d = rank - 1; d >= 0; d--) {
            ia += sa[d], ib += sb[d];
            if (++idx[d] < shape[d])
                break;
            ia -= sa[d] * shape[d], ib -= sb[d] * shape[d];
            idx[d] = 0;
        }
    }
}

/* out = alpha * dy summed over the dimensions where out has size 1
 * (shape: dy's dims; keep[d]: out keeps dimension d). */
MPRT_KERNEL void mprt_sum_to(int rank, const long *shape, const int *keep, const float *dy,
                        float alpha, long n_out, float *out)
{
    double *acc = calloc((size_t)n_out, sizeof *acc);
    long n = 1, idx[8] = {0}, so[8], s = 1;
    for (int d = rank - 1; d >= 0; d--) {
        so[d] = keep[d] ? s : 0;
        if (keep[d])
            s *= shape[d];
        n *= shape[d];
    }
    long io = 0;
    for (long i = 0; i < n; i++) {
        acc[io] += dy[i];
        for (int d = rank - 1; d >= 0; d--) {
            io += so[d];
            if (++idx[d] < shape[d])
                break;
            io -= so[d] * shape[d];
            idx[d] = 0;
        }
    }
    for (long i = 0; i < n_out; i++)
        out[i] = (float)(alpha * acc[i]);
    free(acc);
}

/* ---- losses ---- */

/* Softmax cross-entropy, mean over the labels that are not ignore_index.
 * scores (N, C, D) with D the product of trailing dims; labels (N, D). */
MPRT_KERNEL void mprt_sce(int N, int C, long D, const float *x, const int64_t *labels,
                     int64_t ignore, float *loss, float *logp)
{
    double total = 0;
    long count = 0;
    for (int n = 0; n < N; n++)
        for (long d = 0; d < D; d++) {
            const float *xs = x + (size_t)n * C * D + d;
            float *lp = logp + (size_t)n * C * D + d;
            float mx = xs[0];
            for (int c = 1; c < C; c++)
                mx = xs[c * D] > mx ? xs[c * D] : mx;
            double se = 0;
            for (int c = 0; c < C; c++)
                se += exp((double)xs[c * D] - mx);
            float lse = (float)(mx + log(se));
            for (int c = 0; c < C; c++)
                lp[c * D] = xs[c * D] - lse;
            int64_t t = labels[(size_t)n * D + d];
            if (t == ignore)
                continue;
            total -= lp[t * D];
            count++;
        }
    *loss = count ? (float)(total / count) : 0.0f;
}

MPRT_KERNEL void mprt_sce_grad(int N, int C, long D, const float *dloss, const float *logp,
                          const int64_t *labels, int64_t ignore, float *dx)
{
    long count = 0;
    for (long i = 0; i < (long)N * D; i++)
        count += labels[i] != ignore;
    float scale = count ? dloss[0] / (float)count : 0.0f;
    for (int n = 0; n < N; n++)
        for (long d = 0; d < D; d++) {
            int64_t t = labels[(size_t)n * D + d];
            for (int c = 0; c < C; c++) {
                size_t i = (size_t)n * C * D + (size_t)c * D + d;
                dx[i] = t == ignore ? 0.0f : (expf(logp[i]) - (c == t)) * scale;
            }
        }
}

MPRT_KERNEL void mprt_mse(long n, const float *x, const float *t, float *loss)
{
    double s = 0;
    for (long i = 0; i < n; i++)
        s += (double)(x[i] - t[i]) * (x[i] - t[i]);
    *loss = (float)(s / n);
}

MPRT_KERNEL void mprt_mse_grad(long n, const float *dloss, const float *x, const float *t, float *dx)
{
    float scale = 2.0f * dloss[0] / (float)n;
    for (long i = 0; i < n; i++)
        dx[i] = (x[i] - t[i]) * scale;
}

/* ---- convolution (2-D) as im2col + GEMM ---- */

typedef struct MprtConv {
    int N, C, H, W, M, KH, KW, OH, OW, group;
    int sh, sw, dh, dw, ph, pw;   /* strides, dilations, leading pads */
} MprtConv;

MPRT_KERNEL void mprt_im2col(const MprtConv *p, const float *x, float *col)
{
    int cg = p->C / p->group;
    for (int c = 0; c < cg; c++)
        for (int kh = 0; kh < p->KH; kh++)
            for (int kw = 0; kw < p->KW; kw++) {
                float *row = col + ((size_t)(c * p->KH + kh) * p->KW + kw) * p->OH * p->OW;
                for (int oh = 0; oh < p->OH; oh++) {
                    int ih = oh * p->sh - p->ph + kh * p->dh;
                    for (int ow = 0; ow < p->OW; ow++) {
                        int iw = ow * p->sw - p->pw + kw * p->dw;
                        row[oh * p->OW + ow] = ih >= 0 && ih < p->H && iw >= 0 && iw < p->W
                                                   ? x[((size_t)c * p->H + ih) * p->W + iw] : 0.0f;
                    }
                }
            }
}

MPRT_KERNEL void mprt_col2im(const MprtConv *p, const float *col, float *x)
{
    int cg = p->C / p->group;
    for (int c = 0; c < cg; c++)
        for (int kh = 0; kh < p->KH; kh++)
            for (int kw = 0; kw < p->KW; kw++) {
                const float *row = col + ((size_t)(c * p->KH + kh) * p->KW + kw) * p->OH * p->OW;
                for (int oh = 0; oh < p->OH; oh++) {
                    int ih = oh * p->sh - p->ph + kh * p->dh;
                    if (ih < 0 || ih >= p->H)
                        continue;
                    for (int ow = 0; ow < p->OW; ow++) {
                        int iw = ow * p->sw - p->pw + kw * p->dw;
                        if (iw >= 0 && iw < p->W)
                            x[((size_t)c * p->H + ih) * p->W + iw] += row[oh * p->OW + ow];
                    }
                }
            }
}

MPRT_KERNEL float *mprt_conv_col(const MprtConv *p)
{
    size_t n = (size_t)(p->C / p->group) * p->KH * p->KW * p->OH * p->OW;
    float *col = malloc(n * sizeof *col);
    if (!col) {
        fprintf(stderr, "train: error: out of memory for a convolution workspace "
                "(%zu bytes)\n", n * sizeof *col);
        exit(1);
    }
    return col;
}

MPRT_KERNEL void mprt_conv(const MprtConv *p, const float *x, const float *w, const float *b, float *y)
{
    float *col = mprt_conv_col(p);
    int cg = p->C / p->group, mg = p->M / p->group, K = cg * p->KH * p->KW, P = p->OH * p->OW;
    for (int n = 0; n < p->N; n++)
        for (int g = 0; g < p->group; g++) {
            mprt_im2col(p, x + ((size_t)n * p->C + (size_t)g * cg) * p->H * p->W, col);
            float *yg = y + ((size_t)n * p->M + (size_t)g * mg) * P;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mg, P, K, 1.0f,
                        w + (size_t)g * mg * K, K, col, P, 0.0f, yg, P);
            if (b)
                for (int m = 0; m < mg; m++)
                    for (int i = 0; i < P; i++)
                        yg[(size_t)m * P + i] += b[g * mg + m];
        }
    free(col);
}

MPRT_KERNEL void mprt_conv_grad_x(const MprtConv *p, const float *dy, const float *w, float *dx)
{
    float *col = mprt_conv_col(p);
    int cg = p->C / p->group, mg = p->M / p->group, K = cg * p->KH * p->KW, P = p->OH * p->OW;
    memset(dx, 0, (size_t)p->N * p->C * p->H * p->W * sizeof *dx);
    for (int n = 0; n < p->N; n++)
        for (int g = 0; g < p->group; g++) {
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, P, mg, 1.0f,
                        w + (size_t)g * mg * K, K, dy + ((size_t)n * p->M + (size_t)g * mg) * P,
                        P, 0.0f, col, P);
            mprt_col2im(p, col, dx + ((size_t)n * p->C + (size_t)g * cg) * p->H * p->W);
        }
    free(col);
}

MPRT_KERNEL void mprt_conv_grad_w(const MprtConv *p, const float *dy, const float *x, float *dw)
{
    float *col = mprt_conv_col(p);
    int cg = p->C / p->group, mg = p->M / p->group, K = cg * p->KH * p->KW, P = p->OH * p->OW;
    for (int n = 0; n < p->N; n++)
        for (int g = 0; g < p->group; g++) {
            mprt_im2col(p, x + ((size_t)n * p->C + (size_t)g * cg) * p->H * p->W, col);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, mg, K, P, 1.0f,
                        dy + ((size_t)n * p->M + (size_t)g * mg) * P, P, col, P,
                        n ? 1.0f : 0.0f, dw + (size_t)g * mg * K, K);
        }
    free(col);
}

/* d bias[m] = sum over n and positions of dy[n, m, :] */
MPRT_KERNEL void mprt_channel_sum(int N, int M, long P, const float *dy, float *db)
{
    for (int m = 0; m < M; m++) {
        double s = 0;
        for (int n = 0; n < N; n++)
            for (long i = 0; i < P; i++)
                s += dy[((size_t)n * M + m) * P + i];
        db[m] = (float)s;
    }
}

/* ---- batch normalization ---- */

/* Inference (mprt_training == 0): Y = (X - running_mean) /
 * sqrt(running_var + eps) * scale + bias; the running statistics stay. */
MPRT_KERNEL void mprt_bn_infer(int N, int C, long P, const float *x, const float *scale,
                          const float *bias, const float *running_mean,
                          const float *running_var, float eps, float *y)
{
    for (int c = 0; c < C; c++) {
        float inv = (float)(1.0 / sqrt((double)running_var[c] + eps));
        for (int n = 0; n < N; n++)
            for (long i = 0; i < P; i++) {
                size_t k = ((size_t)n * C + c) * P + i;
                y[k] = (x[k] - running_mean[c]) * inv * scale[c] + bias[c];
            }
    }
}

/* Training: Y = (X - mean) / sqrt(var + eps) * scale + bias with the
 * batch's statistics; running stats move by momentum (ONNX's convention:
 * new = momentum * old + (1 - momentum) * batch), the variance unbiased as
 * in PyTorch. In inference mode (mprt_training == 0), mprt_bn_infer. */
MPRT_KERNEL void mprt_bn_train(int N, int C, long P, const float *x, const float *scale,
                          const float *bias, float *running_mean, float *running_var,
                          float momentum, float eps, float *y)
{
    if (!mprt_training) {
        mprt_bn_infer(N, C, P, x, scale, bias, running_mean, running_var, eps, y);
        return;
    }
    long cnt = (long)N * P;
    for (int c = 0; c < C; c++) {
        double s = 0, ss = 0;
        for (int n = 0; n < N; n++)
            for (long i = 0; i < P; i++)
                s += x[((size_t)n * C + c) * P + i];
        double mean = s / cnt;
        for (int n = 0; n < N; n++)
            for (long i = 0; i < P; i++) {
                double d = x[((size_t)n * C + c) * P + i] - mean;
                ss += d * d;
            }
        double var = ss / cnt;
        float inv = (float)(1.0 / sqrt(var + eps));
        for (int n = 0; n < N; n++)
            for (long i = 0; i < P; i++) {
                size_t k = ((size_t)n * C + c) * P + i;
                y[k] = (float)((x[k] - mean) * inv) * scale[c] + bias[c];
            }
        running_mean[c] = momentum * running_mean[c] + (1 - momentum) * (float)mean;
        running_var[c] = momentum * running_var[c] +
                         (1 - momentum) * (float)(cnt > 1 ? var * cnt / (cnt - 1) : var);
    }
}

MPRT_KERNEL void mprt_bn_grad(int N, int C, long P, const float *dy, const float *x,
                         const float *scale, float eps, float *dx, float *dscale, float *dbias)
{
    long cnt = (long)N * P;
    for (int c = 0; c < C; c++) {
        double s = 0, ss = 0, sdy = 0, sdyx = 0;
        for (int n = 0; n < N; n++)
            for (long i = 0; i < P; i++)
                s += x[((size_t)n * C + c) * P + i];
        double mean = s / cnt;
        for (int n = 0; n < N; n++)
            for (long i = 0; i < P; i++) {
                size_t k = ((size_t)n * C + c) * P + i;
                double d = x[k] - mean;
                ss += d * d;
                sdy += dy[k];
                sdyx += dy[k] * d;
            }
        double inv = 1.0 / sqrt(ss / cnt + eps);
        dscale[c] = (float)(sdyx * inv);
        dbias[c] = (float)sdy;
        for (int n = 0; n < N; n++)
            for (long i = 0; i < P; i++) {
                size_t k = ((size_t)n * C + c) * P + i;
                double xhat = (x[k] - mean) * inv;
                dx[k] = (float)(scale[c] * inv * (dy[k] - sdy / cnt - xhat * sdyx * inv / cnt));
            }
    }
}

/* ---- pooling (2-D) ---- */

typedef struct MprtPool {
    int N, C, H, W, OH, OW, KH, KW, sh, sw, dh, dw, ph, pw;
} MprtPool;

MPRT_KERNEL long mprt_pool_argmax(const MprtPool *p, const float *x, int oh, int ow)
{
    long best = -1;
    float bv = -INFINITY;
    for (int kh = 0; kh < p->KH; kh++) {
        int ih = oh * p->sh - p->ph + kh * p->dh;
        if (ih < 0 || ih >= p->H)
            continue;
        for (int kw = 0; kw < p->KW; kw++) {
            int iw = ow * p->sw - p->pw + kw * p->dw;
            if (iw < 0 || iw >= p->W)
                continue;
            float v = x[(size_t)ih * p->W + iw];
            if (best < 0 || v > bv || isnan(v))
                bv = v, best = (long)ih * p->W + iw;
        }
    }
    return best;
}

MPRT_KERNEL void mprt_maxpool(const MprtPool *p, const float *x, float *y)
{
    for (long nc = 0; nc < (long)p->N * p->C; nc++) {
        const float *xs = x + (size_t)nc * p->H * p->W;
        for (int oh = 0; oh < p->OH; oh++)
            for (int ow = 0; ow < p->OW; ow++) {
                long k = mprt_pool_argmax(p, xs, oh, ow);
                y[((size_t)nc * p->OH + oh) * p->OW + ow] = k >= 0 ? xs[k] : -INFINITY;
            }
    }
}

MPRT_KERNEL void mprt_maxpool_grad(const MprtPool *p, const float *dy, const float *x, float *dx)
{
    memset(dx, 0, (size_t)p->N * p->C * p->H * p->W * sizeof *dx);
    for (long nc = 0; nc < (long)p->N * p->C; nc++) {
        const float *xs = x + (size_t)nc * p->H * p->W;
        for (int oh = 0; oh < p->OH; oh++)
            for (int ow = 0; ow < p->OW; ow++) {
                long k = mprt_pool_argmax(p, xs, oh, ow);
                if (k >= 0)
                    dx[(size_t)nc * p->H * p->W + k] += dy[((size_t)nc * p->OH + oh) * p->OW + ow];
            }
    }
}

MPRT_KERNEL void mprt_gap(long NC, long P, const float *x, float *y)
{
    for (long i = 0; i < NC; i++) {
        double s = 0;
        for (long k = 0; k < P; k++)
            s += x[(size_t)i * P + k];
        y[i] = (float)(s / P);
    }
}

MPRT_KERNEL void mprt_gap_grad(long NC, long P, const float *dy, float *dx)
{
    for (long i = 0; i < NC; i++)
        for (long k = 0; k < P; k++)
            dx[(size_t)i * P + k] = dy[i] / (float)P;
}

/* ---- optimizers (as torch.optim) ---- */

MPRT_KERNEL void mprt_sgd(long n, float *w, const float *g, float *buf, float scale, float lr,
                     float momentum, float wd, int nesterov, int first)
{
    for (long i = 0; i < n; i++) {
        float d = g[i] * scale + wd * w[i];
        if (buf) {
            buf[i] = first ? d : momentum * buf[i] + d;
            d = nesterov ? d + momentum * buf[i] : buf[i];
        }
        w[i] -= lr * d;
    }
}

MPRT_KERNEL void mprt_adamw(long n, float *w, const float *g, float *m, float *v, float scale,
                       float lr, float b1, float b2, float eps, float wd, long step)
{
    float bc1 = 1.0f - powf(b1, (float)step), bc2 = 1.0f - powf(b2, (float)step);
    float step_size = lr / bc1, bc2s = sqrtf(bc2);
    for (long i = 0; i < n; i++) {
        float gi = g[i] * scale;
        w[i] *= 1.0f - lr * wd;
        m[i] = b1 * m[i] + (1.0f - b1) * gi;
        v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
        w[i] -= step_size * m[i] / (sqrtf(v[i]) / bc2s + eps);
    }
}

/* Scale that clips the gradients to a global L2 norm, as
 * torch.nn.utils.clip_grad_norm_. */
MPRT_KERNEL float mprt_clip_scale(int k, const float *const *g, const long *n, float scale,
                             float max_norm, double *norm_out)
{
    double s = 0;
    for (int j = 0; j < k; j++)
        for (long i = 0; i < n[j]; i++)
            s += (double)(g[j][i] * scale) * (g[j][i] * scale);
    double norm = sqrt(s);
    *norm_out = norm;
    double c = max_norm / (norm + 1e-6);
    return c < 1.0 ? (float)c : 1.0f;
}
