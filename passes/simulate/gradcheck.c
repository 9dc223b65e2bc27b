/* gradcheck.c - are the single-device gradients the derivatives of the
 * loss?  The ranks are compared with the single-device step, which uses
 * the same bprop rules: a wrong rule would be wrong on both sides and
 * agree.  So the single-device gradients are also checked against central
 * differences of the loss itself, which uses no bprop rule at all.
 *
 * For each weight W with gradient g (the gradient operand of its optimizer
 * update) a few probe directions d are tried: g itself (normalised), a
 * seeded random +-1 direction, the element where |g| is largest and one
 * seeded element.  The step is run again with W = W0 + h d and W0 - h d
 * (every other input as before) and the loss difference L+ - L- is compared
 * with sum_i g_i delta_i, delta being the difference of the two perturbed
 * weights as stored.  The simulator computes in float32, so the difference
 * of two losses carries rounding noise of about 1e-7 |L| / h; the
 * comparison is therefore relative to |g| |delta| (the largest the
 * directional derivative can be), not to each element of g: a wrong rule
 * (a missing factor, a transpose, a dropped term) moves the directional
 * derivative by a sizeable fraction of |g| |delta|, rounding does not.
 * What the two losses' own float32 spacing cannot resolve (LOSS_ULPS of
 * it) is not counted: with a loss of 3000 one spacing is 2.4e-4.
 */
#include <math.h>
#include <string.h>

#include "simint.h"

#define PROBES 4
#define LOSS_ULPS 4 /* the rounding allowed in a loss difference, in float32 spacings of the loss */

/* the spacing of float32 numbers at x */
static double loss_ulp(double x)
{
	float f = fabsf((float)x);
	return isfinite(f) ? (double)nextafterf(f, INFINITY) - (double)f : 0;
}

/* the loss: what the step returns, through Depend(loss, updates) */
static const Node *loss_node(Graph *g)
{
	const Node *ret = g->nodes.n ? g->nodes.a[g->nodes.n - 1] : NULL;
	if (!ret || ret->kind != NK_RETURN || !ret->nargs || ret->args[0].kind != V_NODE)
		return NULL;
	const Node *n = ret->args[0].u.node;
	while (n->kind == NK_CNODE && n->op == OP_Depend && n->nargs && n->args[0].kind == V_NODE)
		n = n->args[0].u.node;
	return n;
}

/* mark what the loss needs: its operands, transitively (nodes come in
 * order, so one backward sweep) */
static uint8_t *loss_cone(Module *m, Graph *g, const Node *loss)
{
	uint8_t *need = xcalloc(m->next_id + 1, 1);
	need[loss->id] = 1;
	for (uint32_t i = g->nodes.n; i-- > 0;) {
		const Node *n = g->nodes.a[i];
		if (!need[n->id])
			continue;
		for (uint32_t k = 0; k < n->nargs; k++)
			if (n->args[k].kind == V_NODE)
				need[n->args[k].u.node->id] = 1;
	}
	return need;
}

/* the loss of one run of m with weight `name` replaced by w */
static int loss_with(Module *m, const SimOptions *so, const Node *loss, const char *name, const float *w, int64_t n,
                     double *out, char *why, size_t whylen)
{
	SimRun *r = sim_new(&m, 1, so);
	int rc = -1;
	if (sim_set_input(r, 0, name, w, n) == 0 && sim_exec(r) == 0) {
		const SimValue *v = sim_value(r, 0, loss);
		if (v && v->kind == SV_TENSOR && v->t->numel == 1) {
			*out = v->t->data[0];
			rc = 0;
		} else {
			snprintf(why, whylen, "the step returns no scalar loss");
		}
	} else {
		snprintf(why, whylen, "%s", sim_error(r) ? sim_error(r) : "the run failed");
	}
	sim_free(r);
	return rc;
}

/* probe k of weight w0 (n elements) with gradient g, as a unit direction */
static void probe(int k, const float *g, int64_t n, uint64_t key, double gnorm, double *d)
{
	memset(d, 0, (size_t)n * sizeof *d);
	if (k == 0) {
		for (int64_t i = 0; i < n; i++)
			d[i] = gnorm > 0 ? g[i] / gnorm : 0;
	} else if (k == 1) {
		for (int64_t i = 0; i < n; i++)
			d[i] = (sim_mix64(key + (uint64_t)i) & 1 ? 1.0 : -1.0) / sqrt((double)n);
	} else if (k == 2) {
		int64_t best = 0;
		for (int64_t i = 1; i < n; i++)
			if (fabs(g[i]) > fabs(g[best]))
				best = i;
		d[best] = 1;
	} else {
		d[sim_mix64(key ^ 0x5bd1e995u) % (uint64_t)n] = 1;
	}
}

int sim_check_gradients(Module *m, const SimRun *G, const SimOptions *so, double h, double tol, SimGradCheck *out)
{
	memset(out, 0, sizeof *out);
	Graph *g = ir_entry(m);
	SimOptions o = *so;
	const Node *loss = g ? loss_node(g) : NULL;
	if (!loss) {
		snprintf(out->skipped, sizeof out->skipped, "the step returns no loss");
		return -1;
	}
	uint8_t *need = loss_cone(m, g, loss);
	double K = m->micro > 1 ? (double)m->micro : 1;
	o.global = NULL;
	o.slice = NULL;
	o.trace = NULL;
	o.faults = 0;
	o.only = need;
	for (uint32_t i = 0; g && i < g->nodes.n; i++) {
		Node *u = g->nodes.a[i];
		int gi = sim_grad_operand(u);
		if (gi < 0 || !u->nargs || u->args[0].kind != V_NODE || u->args[0].u.node->kind != NK_PARAM ||
		    (uint32_t)gi >= u->nargs || u->args[gi].kind != V_NODE)
			continue;
		Node *w = u->args[0].u.node;
		const SimTensor *gt = sim_tensor(G, 0, u->args[gi].u.node), *w0 = sim_initial_tensor(G, 0, w);
		if (!gt || !w0 || gt->numel != w0->numel || !gt->numel)
			continue;
		out->weights++;
		int64_t n = w0->numel;
		double gnorm = 0;
		for (int64_t j = 0; j < n; j++)
			gnorm += (double)gt->data[j] * gt->data[j];
		gnorm = sqrt(gnorm);
		const char *name = sym_str(w->name);
		uint64_t key = sim_mix64(so->seed ^ std_hash_bytes(name, strlen(name)) ^ 0x6772616463686bULL);
		double *d = xmalloc((size_t)n * sizeof *d);
		float *wp = xmalloc((size_t)n * sizeof *wp), *wm = xmalloc((size_t)n * sizeof *wm);
		for (int k = 0; k < PROBES; k++) {
			probe(k, gt->data, n, key, gnorm, d);
			double claim = 0, dnorm = 0, lp = 0, lm = 0;
			for (int64_t j = 0; j < n; j++) {
				wp[j] = (float)(w0->data[j] + h * d[j]);
				wm[j] = (float)(w0->data[j] - h * d[j]);
				double delta = (double)wp[j] - (double)wm[j];
				claim += gt->data[j] * delta;
				dnorm += delta * delta;
			}
			dnorm = sqrt(dnorm);
			if (dnorm == 0)
				continue;
			char why[640] = "";
			if (loss_with(m, &o, loss, name, wp, n, &lp, why, sizeof why) < 0 ||
			    loss_with(m, &o, loss, name, wm, n, &lm, why, sizeof why) < 0) {
				snprintf(out->skipped, sizeof out->skipped, "%s", why);
				free(d);
				free(wp);
				free(wm);
				free(need);
				return -1;
			}
			/* a zero gradient is judged against a small absolute scale;
			 * and L+ - L- cannot resolve less than the float32 spacing
			 * of the losses themselves: a few units of it are rounding
			 * (a large loss with a small gradient, a gradient that is
			 * zero but for rounding, as a Softmax's sum has) */
			/* over K micro-batches the step returns their losses' sum and
			 * updates with the gradients times sens = 1/K (training-step.md
			 * §1.3, _TrainGradAccuStepCell): the gradient is that of the
			 * sum over K */
			lp /= K, lm /= K;
			double scale = (gnorm > 1e-6 ? gnorm : 1e-6) * dnorm, off = fabs((lp - lm) - claim);
			double rounding = LOSS_ULPS * loss_ulp(fabs(lp) > fabs(lm) ? lp : lm) / K;
			double err = (off > rounding ? off - rounding : 0) / scale; /* beyond rounding */
			out->probes++;
			if (err > out->max_err) {
				out->max_err = err;
				out->worst_param = w;
			}
			if (err > tol && !out->bad++) {
				out->first_param = w;
				out->first_node = u->args[gi].u.node;
				out->first_probe = k;
				out->claimed = claim / dnorm;
				out->measured = (lp - lm) / dnorm;
			}
		}
		free(d);
		free(wp);
		free(wm);
	}
	free(need);
	return out->bad ? 1 : 0;
}

static const char *const probe_names[PROBES] = {"along the gradient", "along a random direction",
                                                "at its largest element", "at a random element"};

void sim_print_gradcheck(FILE *f, const SimGradCheck *c)
{
	if (!c->weights)
		return;
	if (!c->bad)
		fprintf(f,
		        "simulate: central differences: %d weights, %d directional derivatives of the single-device "
		        "loss agree with its gradients, max error %.3g of |gradient| beyond the losses' rounding\n",
		        c->weights, c->probes, c->max_err);
	else
		fprintf(f,
		        "simulate: central differences: %d of %d directional derivatives disagree with the "
		        "single-device gradients; first: parameter %s %s: the gradient %%%d says %.9g, the loss "
		        "changes by %.9g\n",
		        c->bad, c->probes, sym_str(c->first_param->name), probe_names[c->first_probe],
		        c->first_node->local, c->claimed, c->measured);
}
