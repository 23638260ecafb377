/*
 * examples/fashion_mnist/mlp.c — forward and backward of the MLP in mlp.h.
 * All matrix products go through cblas_sgemm; everything else is a plain loop.
 */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mlp.h"

int mlp_fan_in(const mlp_dims_t *d, int layer) {
    return layer == 0 ? d->in : layer == 1 ? d->h1 : d->h2;
}

int mlp_fan_out(const mlp_dims_t *d, int layer) {
    return layer == 0 ? d->h1 : layer == 1 ? d->h2 : d->out;
}

static int max_width(const mlp_dims_t *d) {
    int m = d->in;
    if (d->h1 > m) m = d->h1;
    if (d->h2 > m) m = d->h2;
    if (d->out > m) m = d->out;
    return m;
}

int mlp_workspace_init(mlp_workspace_t *ws, const mlp_dims_t *d, int max_batch) {
    memset(ws, 0, sizeof *ws);
    ws->max_batch = max_batch;
    size_t b = (size_t)max_batch, w = (size_t)max_width(d);
    ws->x = malloc(b * (size_t)d->in * sizeof(float));
    for (int l = 0; l < MLP_LAYERS; l++)
        ws->act[l] = malloc(b * (size_t)mlp_fan_out(d, l) * sizeof(float));
    ws->dact = malloc(b * w * sizeof(float));
    ws->dtmp = malloc(b * w * sizeof(float));
    if (!ws->x || !ws->act[0] || !ws->act[1] || !ws->act[2] || !ws->dact || !ws->dtmp) {
        mlp_workspace_free(ws);
        return -1;
    }
    return 0;
}

void mlp_workspace_free(mlp_workspace_t *ws) {
    free(ws->x);
    for (int l = 0; l < MLP_LAYERS; l++)
        free(ws->act[l]);
    free(ws->dact);
    free(ws->dtmp);
    memset(ws, 0, sizeof *ws);
}

void mlp_load_input(mlp_workspace_t *ws, const mlp_dims_t *d, const uint8_t *pixels, int batch) {
    size_t n = (size_t)batch * (size_t)d->in;
    for (size_t i = 0; i < n; i++)
        ws->x[i] = ((float)pixels[i] / 255.0f - FMNIST_MEAN) / FMNIST_STD;
}

void mlp_forward_layer(const mlp_dims_t *d, const mlp_params_t *p, mlp_workspace_t *ws, int l,
                       int batch) {
    const float *in = l == 0 ? ws->x : ws->act[l - 1];
    int fi = mlp_fan_in(d, l), fo = mlp_fan_out(d, l);
    float *out = ws->act[l];
    /* out[B x fo] = in[B x fi] . W^T, W [fo x fi]; then + b, ReLU on hidden layers */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, fo, fi, 1.0f, in, fi, p->w[l], fi,
                0.0f, out, fo);
    const float *b = p->b[l];
    int relu = l < MLP_LAYERS - 1;
    for (int i = 0; i < batch; i++) {
        float *row = out + (size_t)i * fo;
        for (int j = 0; j < fo; j++) {
            float v = row[j] + b[j];
            row[j] = relu && v < 0.0f ? 0.0f : v;
        }
    }
}

void mlp_forward(const mlp_dims_t *d, const mlp_params_t *p, mlp_workspace_t *ws, int batch) {
    for (int l = 0; l < MLP_LAYERS; l++)
        mlp_forward_layer(d, p, ws, l, batch);
}

double mlp_loss(const mlp_dims_t *d, mlp_workspace_t *ws, const uint8_t *labels, int batch) {
    const float *logits = ws->act[MLP_LAYERS - 1];
    int k = d->out;
    double total = 0.0;
    float inv_b = 1.0f / (float)batch;
    for (int i = 0; i < batch; i++) {
        const float *z = logits + (size_t)i * k;
        float *dz = ws->dact + (size_t)i * k;
        float zmax = z[0];
        for (int j = 1; j < k; j++)
            zmax = z[j] > zmax ? z[j] : zmax;
        double sum = 0.0;
        for (int j = 0; j < k; j++)
            sum += exp((double)(z[j] - zmax));
        double log_sum = log(sum);
        total += log_sum - (double)(z[labels[i]] - zmax);
        /* d/dz of mean CE = (softmax - onehot) / B */
        for (int j = 0; j < k; j++) {
            float s = (float)(exp((double)(z[j] - zmax) - log_sum));
            dz[j] = (s - (j == labels[i] ? 1.0f : 0.0f)) * inv_b;
        }
    }
    return total / batch;
}

void mlp_backward_layer(const mlp_dims_t *d, const mlp_params_t *p, mlp_tensors_t *g,
                        mlp_workspace_t *ws, int layer, int batch) {
    int fi = mlp_fan_in(d, layer), fo = mlp_fan_out(d, layer);
    const float *in = layer == 0 ? ws->x : ws->act[layer - 1];
    const float *dout = ws->dact; /* [B x fo] */
    /* dW[fo x fi] += dout^T . in ; db[fo] += column sums of dout */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, fo, fi, batch, 1.0f, dout, fo, in, fi,
                1.0f, g->w[layer], fi);
    float *db = g->b[layer];
    for (int i = 0; i < batch; i++) {
        const float *row = dout + (size_t)i * fo;
        for (int j = 0; j < fo; j++)
            db[j] += row[j];
    }
    if (layer == 0) return; /* no gradient needed w.r.t. the input pixels */
    /* din[B x fi] = dout . W, masked by the ReLU of the previous layer */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, fi, fo, 1.0f, dout, fo,
                p->w[layer], fi, 0.0f, ws->dtmp, fi);
    size_t n = (size_t)batch * fi;
    for (size_t i = 0; i < n; i++)
        if (in[i] <= 0.0f) ws->dtmp[i] = 0.0f;
    float *t = ws->dact;
    ws->dact = ws->dtmp;
    ws->dtmp = t;
}

int mlp_count_correct(const mlp_dims_t *d, const mlp_workspace_t *ws, const uint8_t *labels, int n,
                      uint8_t *correct) {
    const float *logits = ws->act[MLP_LAYERS - 1];
    int hits = 0;
    for (int i = 0; i < n; i++) {
        const float *z = logits + (size_t)i * d->out;
        int best = 0;
        for (int j = 1; j < d->out; j++)
            if (z[j] > z[best]) best = j;
        int ok = best == labels[i];
        if (correct) correct[i] = (uint8_t)ok;
        hits += ok;
    }
    return hits;
}
