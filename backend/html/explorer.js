/* explorer.js - the --html page's script (backend/html.c writes the data).
 *
 * The data (one JSON document in #sappc-data): views (plan, ranks), each with
 * its overview SVG drawn by libgvc, the SVG of every collapsed box drawn
 * open ("pieces", shared by equal boxes), and its nodes as flat integer
 * records pointing into one string table.  A click on a box opens its piece
 * in place: everything below the box moves down by the piece's height.
 * URL "#selftest=NAME[&view=V][&zoom=K][&tab=report][&open=all]" searches
 * NAME, clicks the first hit (zooming out K times around it; opening every
 * box and counting those that overlap one below or left their box's place)
 * and writes what the panel shows into #selftest (testsuite/html.sh).
 */
(function () {
	'use strict';
	var D = JSON.parse(document.getElementById('sappc-data').textContent);
	var S = D.strings;
	var F = {id: 0, group: 1, local: 2, scope: 3, name: 4, op: 5, strat: 6, source: 7, levels: 8, tensors: 9,
		stage: 10, phase: 11};
	var PHASES = ['forward', 'backward', 'optimizer']; /* a training step's parts (F.phase) */
	var SVGNS = 'http://www.w3.org/2000/svg';

	function el(tag, attrs, text) {
		var e = document.createElement(tag);
		for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
		if (text !== undefined) e.textContent = text;
		return e;
	}
	function human(b) {
		var u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'], i = 0;
		while (b >= 1024 && i < 4) { b /= 1024; i++; }
		return i ? b.toFixed(2) + ' ' + u[i] : b.toFixed(0) + ' ' + u[i];
	}
	function us(s) { return (s * 1e6).toFixed(2); }

	/* ---------------------------------------------------------- page */
	var header = el('header'), main = el('main');
	var title = el('h1', {}, 'sappc: ' + D.input + ' \u2014 ' + D.devices + ' device' + (D.devices > 1 ? 's' : '') +
		(D.stages > 1 ? ', ' + D.stages + ' stages' : ''));
	var viewSel = el('select', {id: 'view', title: 'plan view or the graph of one rank'});
	D.views.forEach(function (v, i) { viewSel.appendChild(el('option', {value: i}, v.name)); });
	if (D.ranks_left_out) /* too large to hold every rank: how to see another */
		viewSel.appendChild(el('option', {disabled: ''}, D.ranks_left_out + ' more ranks: sappc --rank=R --html'));
	var search = el('input', {type: 'search', id: 'search', placeholder: 'search operator, name or scope'});
	var tabs = el('span', {'class': 'tabs'});
	var tabGraph = el('button', {'class': 'on'}, 'Graph'), tabReport = el('button', {}, 'Report');
	tabs.appendChild(tabGraph);
	tabs.appendChild(tabReport);
	var viewLabel = el('label', {}, 'view ');
	viewLabel.appendChild(viewSel);
	[title, viewLabel, search, tabs].forEach(function (x) { header.appendChild(x); });
	var graph = el('div', {id: 'graph'}), aside = el('aside', {id: 'panel'}), report = el('div', {id: 'report'});
	var results = el('div', {id: 'results'}), hint = el('div', {id: 'hint'},
		'drag to pan, wheel to zoom, click an operator for its plan, a box to open it');
	graph.appendChild(results);
	graph.appendChild(hint);
	main.appendChild(graph);
	main.appendChild(report);
	main.appendChild(aside);
	document.body.appendChild(header);
	document.body.appendChild(main);
	aside.appendChild(el('p', {'class': 'muted'}, 'Click an operator to see its strategy, layouts, search levels ' +
		'and communication; click a box to open it.'));

	/* ---------------------------------------------------------- a view */
	var V, svg, g0, vb, nodeCount, expanded, shiftable, where;

	function rec(i, f) { return V.nodes[i * V.fields + f]; }
	function fullName(i) {
		var sc = S[rec(i, F.scope)];
		return (sc ? sc + '/' : '') + S[rec(i, F.name)];
	}

	function parseSvg(text) {
		var doc = new DOMParser().parseFromString(text, 'image/svg+xml');
		return document.importNode(doc.documentElement, true);
	}

	function showView(k) {
		V = D.views[k];
		nodeCount = V.nodes.length / V.fields;
		expanded = {};
		where = {}; /* node index -> [group, position] */
		V.groups.forEach(function (g, gi) { g[2].forEach(function (n, p) { where[n] = [gi, p]; }); });
		if (svg) svg.remove();
		svg = parseSvg(V.svg);
		svg.removeAttribute('width');
		svg.removeAttribute('height');
		graph.insertBefore(svg, results);
		g0 = svg.querySelector('g.graph');
		shiftable = [];
		collect(g0);
		fit();
	}

	/* the elements whose y moves when a box above opens, with their coordinates */
	function collect(root) {
		root.querySelectorAll('polygon, polyline, path, text, ellipse').forEach(function (e) {
			var a = e.tagName === 'path' ? 'd' : e.tagName === 'text' ? 'y' : e.tagName === 'ellipse' ? 'cy' :
				'points';
			e._orig = e.getAttribute(a);
			shiftable.push([e, a, e._orig]);
		});
	}
	/* a box's extent before any box opened (its outline's own points) */
	function origBox(box) {
		var xs = [], ys = [];
		box.querySelector('polygon')._orig.replace(/(-?[\d.]+),(-?[\d.]+)/g, function (m, x, y) {
			xs.push(+x);
			ys.push(+y);
		});
		var x0 = Math.min.apply(null, xs), y0 = Math.min.apply(null, ys);
		return {x: x0, y: y0, width: Math.max.apply(null, xs) - x0, height: Math.max.apply(null, ys) - y0};
	}

	function shiftY(y) {
		var d = 0;
		for (var k in expanded) if (y > expanded[k].cy) d += expanded[k].delta;
		return y + d;
	}
	function moveAttr(a, v) {
		if (a === 'y' || a === 'cy') return String(shiftY(parseFloat(v)));
		return v.replace(/(-?[\d.]+),(-?[\d.]+)/g, function (m, x, y) { return x + ',' + shiftY(parseFloat(y)); });
	}
	function relayout() {
		shiftable.forEach(function (s) { s[0].setAttribute(s[1], moveAttr(s[1], s[2])); });
		for (var k in expanded) {
			var e = expanded[k];
			e.holder.setAttribute('transform', 'translate(' + e.tx + ',' + shiftY(e.top) + ')');
		}
	}

	function boxOf(k) {
		var t = Array.prototype.find.call(g0.querySelectorAll('g.node > title'), function (x) {
			return x.textContent === 'g' + k;
		});
		return t && t.parentNode;
	}
	/* group k's piece drawn open in place of its box */
	function expand(k) {
		if (V.groups[k][1] < 0) return listGroup(k);
		if (expanded[k]) return;
		var box = boxOf(k);
		if (!box) return;
		var bb = origBox(box);
		var piece = parseSvg(V.pieces[V.groups[k][1]]);
		var pg = piece.querySelector('g.graph');
		var w = piece.viewBox.baseVal.width, h = piece.viewBox.baseVal.height, head = 24;
		var holder = document.createElementNS(SVGNS, 'g');
		holder.setAttribute('class', 'piece');
		holder.setAttribute('data-group', k);
		var frame = document.createElementNS(SVGNS, 'rect');
		frame.setAttribute('class', 'piece-frame');
		frame.setAttribute('width', w);
		frame.setAttribute('height', h + head);
		holder.appendChild(frame);
		var hd = document.createElementNS(SVGNS, 'g');
		hd.setAttribute('class', 'piece-head');
		var ht = document.createElementNS(SVGNS, 'text');
		ht.setAttribute('x', 6);
		ht.setAttribute('y', 16);
		ht.textContent = '\u25B2 close ' + S[V.groups[k][0]].replace(/\n/g, ' ');
		hd.appendChild(ht);
		holder.appendChild(hd);
		var inner = document.createElementNS(SVGNS, 'g');
		inner.setAttribute('transform', 'translate(0,' + head + ') ' + (pg.getAttribute('transform') || ''));
		while (pg.firstChild) inner.appendChild(pg.firstChild);
		holder.appendChild(inner);
		inner.querySelectorAll('g.node > title').forEach(function (t) {
			var m = /^x(\d+)$/.exec(t.textContent);
			if (m) t.parentNode.setAttribute('data-node', V.groups[k][2][+m[1]]);
		});
		box.style.display = 'none';
		expanded[k] = {cy: bb.y + bb.height / 2, delta: h + head - bb.height, top: bb.y,
			tx: bb.x + bb.width / 2 - w / 2, holder: holder, box: box};
		g0.appendChild(holder);
		relayout();
	}
	function collapse(k) {
		var e = expanded[k];
		if (!e) return;
		e.holder.remove();
		e.box.style.display = '';
		delete expanded[k];
		relayout();
	}

	/* ---------------------------------------------------------- pan, zoom */
	function setVB() { svg.setAttribute('viewBox', vb.join(' ')); }
	/* the whole picture, or for a tall one its top at full width */
	function fit() {
		var b = svg.viewBox.baseVal, r = graph.getBoundingClientRect();
		var aspect = r.height / Math.max(r.width, 1);
		vb = [b.x, b.y, b.width, b.height > b.width * aspect ? b.width * aspect : b.height];
		setVB();
	}
	/* an element's box in the root's user units (those of the viewBox):
	 * its transforms inside the graph, then the graph's own */
	function toRoot(e) {
		var b = e.getBBox(), m = g0.getCTM().inverse().multiply(e.getCTM());
		var t = g0.transform.baseVal.consolidate();
		if (t) m = t.matrix.multiply(m);
		var p = svg.createSVGPoint(), q = svg.createSVGPoint();
		p.x = b.x; p.y = b.y;
		q.x = b.x + b.width; q.y = b.y + b.height;
		p = p.matrixTransform(m);
		q = q.matrixTransform(m);
		return {x: p.x, y: p.y, w: q.x - p.x, h: q.y - p.y};
	}
	function centerOn(e) {
		var b = toRoot(e), r = graph.getBoundingClientRect();
		var w = Math.max(b.w / 0.6, 1000), h = w * r.height / Math.max(r.width, 1);
		vb = [b.x + b.w / 2 - w / 2, b.y + b.h / 2 - h / 2, w, h];
		setVB();
	}
	var drag = null;
	graph.addEventListener('mousedown', function (ev) {
		drag = {x: ev.clientX, y: ev.clientY, vb: vb.slice(), moved: false};
		graph.classList.add('drag');
	});
	window.addEventListener('mousemove', function (ev) {
		if (!drag) return;
		var r = graph.getBoundingClientRect(), s = vb[2] / r.width;
		var dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
		if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
		vb[0] = drag.vb[0] - dx * s;
		vb[1] = drag.vb[1] - dy * s;
		setVB();
	});
	window.addEventListener('mouseup', function () { graph.classList.remove('drag'); setTimeout(function () { drag = null; }, 0); });
	graph.addEventListener('wheel', function (ev) {
		ev.preventDefault();
		var r = graph.getBoundingClientRect(), f = ev.deltaY > 0 ? 1.2 : 1 / 1.2;
		var px = vb[0] + (ev.clientX - r.left) / r.width * vb[2], py = vb[1] + (ev.clientY - r.top) / r.height * vb[3];
		vb = [px - (px - vb[0]) * f, py - (py - vb[1]) * f, vb[2] * f, vb[3] * f];
		setVB();
	}, {passive: false});

	/* ---------------------------------------------------------- clicks */
	graph.addEventListener('click', function (ev) {
		if (drag && drag.moved) return;
		var head = ev.target.closest('g.piece-head');
		if (head) return collapse(+head.parentNode.getAttribute('data-group'));
		var n = ev.target.closest('g.node');
		if (!n) return;
		if (n.hasAttribute('data-node')) return select(+n.getAttribute('data-node'));
		var t = n.querySelector('title').textContent, m;
		if ((m = /^g(\d+)$/.exec(t))) return expand(+m[1]);
		if ((m = /^n(\d+)$/.exec(t))) {
			for (var i = 0; i < nodeCount; i++) if (rec(i, F.id) === +m[1]) return select(i);
		}
	});

	function nodeElement(i) {
		var w = where[i];
		if (w && V.groups[w[0]][1] < 0) return boxOf(w[0]); /* not drawn open: its box */
		if (w) {
			expand(w[0]);
			var h = expanded[w[0]] && expanded[w[0]].holder;
			return h && h.querySelector('g.node[data-node="' + i + '"]');
		}
		var id = 'n' + rec(i, F.id);
		var t = Array.prototype.find.call(g0.querySelectorAll('g.node > title'), function (x) {
			return x.textContent === id;
		});
		return t ? t.parentNode : null;
	}
	function reveal(i) {
		var e = nodeElement(i);
		if (e) centerOn(e);
		select(i);
	}

	/* ---------------------------------------------------------- the panel */
	function section(name, body) {
		aside.appendChild(el('h3', {}, name));
		aside.appendChild(body);
	}
	function table(cols, rows, numeric) {
		var t = el('table'), tr = el('tr');
		cols.forEach(function (c, k) { tr.appendChild(el('th', numeric && numeric[k] ? {'class': 'num'} : {}, c)); });
		t.appendChild(tr);
		rows.forEach(function (r) {
			var row = el('tr');
			r.forEach(function (c, k) {
				var td = el('td', numeric && numeric[k] ? {'class': 'num'} : {});
				if (c instanceof Node) td.appendChild(c); else td.textContent = c;
				row.appendChild(td);
			});
			t.appendChild(row);
		});
		sortable(t);
		return t;
	}
	function select(i) {
		document.querySelectorAll('#graph g.node.sel').forEach(function (e) { e.classList.remove('sel'); });
		var e = nodeElement(i);
		if (e) e.classList.add('sel');
		aside.textContent = '';
		aside.appendChild(el('h2', {id: 'panel-name'}, '%' + rec(i, F.local) + ' ' + fullName(i)));
		var info = el('table');
		var src = S[rec(i, F.source)];
		[['operator', S[rec(i, F.op)]], ['view', V.name],
			['stage', rec(i, F.stage) < 0 ? '-' : rec(i, F.stage)],
			['phase', PHASES[rec(i, F.phase)] || '-']].forEach(function (r) {
			var tr = el('tr');
			tr.appendChild(el('th', {}, r[0]));
			tr.appendChild(el('td', {id: 'panel-' + r[0]}, r[1]));
			info.appendChild(tr);
		});
		aside.appendChild(info);
		section('Strategy', el('pre', {id: 'panel-strategy'}, S[rec(i, F.strat)] || '(none)'));
		aside.appendChild(el('p', {id: 'panel-source', 'class': src ? 'src-' + src : 'muted'},
			src ? 'source: ' + src + ({searched: ' by the SAPP search', propagated: ' from a neighbour ' +
				'(the search eliminated this operator)', pinned: ' by the user (--interfered)',
				loaded: ' from --strategy-in', 'default': ': batch-parallel default'}[src] || '') :
				'no strategy'));
		section('Tensors (local shape, layout D=device matrix M=tensor map S=global shape)',
			el('pre', {id: 'panel-tensors'}, S[rec(i, F.tensors)]));
		var lv = S[rec(i, F.levels)];
		if (lv) section('Search levels (--explain)', el('pre', {id: 'panel-levels'}, lv));
		var rows = [];
		(V.comm || []).forEach(function (c) {
			if (c[0] !== i && c[1] !== i) return;
			rows.push([link(c[0]), c[2], D.categories[c[3]], c[4], human(c[5]), us(c[6])]);
		});
		if (V.comm) {
			var ct = rows.length ? table(['operation', 'kind', 'category', 'group', 'bytes sent', 'time (us)'], rows,
				[0, 0, 0, 1, 1, 1]) : el('p', {'class': 'muted'}, 'none on this rank');
			ct.id = 'panel-comm';
			section('Communication it causes (bytes each device sends, alpha-beta time)', ct);
		}
	}
	/* a box too large to draw open (html.c PIECE_MAX): its operators listed */
	function listGroup(k) {
		var g = V.groups[k], scope = S[g[0]].split('\n')[0];
		aside.textContent = '';
		aside.appendChild(el('h2', {}, scope));
		aside.appendChild(el('p', {'class': 'muted'}, g[2].length + ' operators, too many to draw open here; ' +
			'draw them with: sappc --focus=' + scope + ' --svg FILE'));
		g[2].slice(0, 1000).forEach(function (i) {
			var d = el('div');
			d.appendChild(link(i));
			d.appendChild(document.createTextNode(' ' + S[rec(i, F.op)] + ' ' + S[rec(i, F.strat)]));
			aside.appendChild(d);
		});
		if (g[2].length > 1000) aside.appendChild(el('p', {'class': 'muted'}, 'and ' + (g[2].length - 1000) +
			' more: search them'));
	}
	function link(i) {
		var a = el('a', {'class': 'op'}, '%' + rec(i, F.local) + ' ' + S[rec(i, F.name)]);
		a.addEventListener('click', function () { showTab(false); reveal(i); });
		return a;
	}

	/* ---------------------------------------------------------- search */
	/* operators whose full name contains q or whose kind is q: the exact
	 * full name first, then operators of kind q, then the others */
	function find(q) {
		var lq = q.toLowerCase(), exact = [], kind = [], part = [];
		for (var i = 0; i < nodeCount; i++) {
			var f = fullName(i);
			if (f === q) exact.push(i);
			else if (S[rec(i, F.op)].toLowerCase() === lq) { if (kind.length < 201) kind.push(i); }
			else if (part.length < 201 && f.toLowerCase().indexOf(lq) >= 0) part.push(i);
		}
		return exact.concat(kind, part).slice(0, 201);
	}
	search.addEventListener('input', function () {
		results.textContent = '';
		var q = search.value.trim();
		if (!q) { results.style.display = 'none'; return; }
		var hits = find(q);
		hits.slice(0, 200).forEach(function (i) {
			var d = el('div', {'data-node': i}, '%' + rec(i, F.local) + ' ' + S[rec(i, F.op)] + '  ' + fullName(i));
			d.addEventListener('click', function () { results.style.display = 'none'; reveal(i); });
			results.appendChild(d);
		});
		if (hits.length > 200) results.appendChild(el('div', {'class': 'more'}, 'more: refine the search'));
		if (!hits.length) results.appendChild(el('div', {'class': 'more'}, 'no match'));
		results.style.display = 'block';
		document.querySelectorAll('#graph g.node.hit').forEach(function (e) { e.classList.remove('hit'); });
		hits.slice(0, 200).forEach(function (i) {
			if (where[i]) return; /* inside a closed box: not opened by typing */
			var e = nodeElement(i);
			if (e) e.classList.add('hit');
		});
	});

	search.addEventListener('keydown', function (ev) {
		if (ev.key === 'Enter') { /* the first hit */
			var first = results.querySelector('div[data-node]');
			if (first) first.click();
		} else if (ev.key === 'Escape') {
			results.style.display = 'none';
		}
	});

	/* ---------------------------------------------------------- report */
	function sortable(t) {
		var ths = t.querySelectorAll('th');
		ths.forEach(function (th, k) {
			th.addEventListener('click', function () {
				var asc = !th.classList.contains('asc');
				ths.forEach(function (x) { x.classList.remove('asc', 'desc'); });
				th.classList.add(asc ? 'asc' : 'desc');
				var rows = Array.prototype.slice.call(t.querySelectorAll('tr')).slice(1);
				rows.sort(function (a, b) {
					var x = a.children[k].getAttribute('data-v') || a.children[k].textContent;
					var y = b.children[k].getAttribute('data-v') || b.children[k].textContent;
					var nx = parseFloat(x), ny = parseFloat(y);
					var c = !isNaN(nx) && !isNaN(ny) ? nx - ny : x < y ? -1 : x > y ? 1 : 0;
					return asc ? c : -c;
				});
				rows.forEach(function (r) { t.appendChild(r); });
			});
		});
	}
	function numCell(td, v) { td.setAttribute('data-v', v); return td; }
	function buildReport() {
		report.textContent = '';
		var rv = D.views.filter(function (v) { return v.totals; });
		var main = rv.filter(function (v) { return v.rank === D.rank; })[0] || rv[0];
		if (!main) return;
		report.appendChild(el('h2', {}, 'This plan against pure data parallel (rank ' + main.rank + ', bytes sent ' +
			'per device, alpha-beta time)'));
		var t = table(['category', 'this plan', 'time (us)', 'data parallel', 'time (us)'], [], [0, 1, 1, 1, 1]);
		t.id = 'report-totals';
		var dp = D.data_parallel;
		var tot = [0, 0, 0, 0];
		D.categories.concat(['communication']).forEach(function (c) {
			var a = main.totals[c], b = dp && dp[c];
			if (!a) a = {bytes: tot[0], seconds: tot[1]}, b = dp && {bytes: tot[2], seconds: tot[3]};
			else { tot[0] += a.bytes; tot[1] += a.seconds; if (b) { tot[2] += b.bytes; tot[3] += b.seconds; } }
			var tr = el('tr');
			tr.appendChild(el('td', {}, c));
			[[human(a.bytes), a.bytes], [us(a.seconds), a.seconds], [b ? human(b.bytes) : '-', b ? b.bytes : -1],
				[b ? us(b.seconds) : '-', b ? b.seconds : -1]].forEach(function (x) {
				tr.appendChild(numCell(el('td', {'class': 'num'}, x[0]), x[1]));
			});
			t.appendChild(tr);
		});
		[['parameters', 'parameters_bytes'], ['activations (no reuse)', 'activations_bytes']].forEach(function (p) {
			var tr = el('tr');
			tr.appendChild(el('td', {}, p[0]));
			tr.appendChild(numCell(el('td', {'class': 'num'}, human(main.totals[p[1]])), main.totals[p[1]]));
			tr.appendChild(el('td'));
			tr.appendChild(numCell(el('td', {'class': 'num'}, dp ? human(dp[p[1]]) : '-'), dp ? dp[p[1]] : -1));
			tr.appendChild(el('td'));
			t.appendChild(tr);
		});
		report.appendChild(t);
		if (!dp) report.appendChild(el('p', {'class': 'muted'}, 'no data-parallel comparison: that plan cannot be lowered'));
		var m = D.model;
		report.appendChild(el('p', {'class': 'muted'}, 'Model: intra-node ' + m.bandwidth_intra_gbps + ' GB/s and ' +
			m.latency_intra_us + ' us, inter-node ' + m.bandwidth_inter_gbps + ' GB/s and ' + m.latency_inter_us +
			' us, ' + m.devices_per_node + ' devices per node.' + (D.phase ? ' Search: ' + D.phase + ' (' +
			D.phase_reason + ').' : '') + (D.auto_pipeline ? ' Auto pipeline: ' + D.auto_pipeline : '')));
		if (rv.length > 1) {
			report.appendChild(el('h2', {}, 'Ranks'));
			report.appendChild(table(['rank', 'stage', 'operators', 'communication', 'time (us)', 'parameters',
				'activations'], rv.map(function (v) {
				var b = 0, s = 0;
				D.categories.forEach(function (c) { b += v.totals[c].bytes; s += v.totals[c].seconds; });
				var per = D.devices / D.stages;
				return [v.rank, Math.floor(v.rank / per), v.operators, human(b), us(s),
					human(v.totals.parameters_bytes), human(v.totals.activations_bytes)];
			}), [1, 1, 1, 1, 1, 1, 1]));
		}
		if (D.schedule) {
			report.appendChild(el('h2', {}, 'Pipeline: ' + D.stages + ' stages, ' + D.micro_batches +
				' micro-batches, 1F1B order (F = forward, B = backward of a micro-batch)'));
			var st = table(['stage', 'ranks', 'order'], D.schedule.map(function (row, s) {
				var r = D.stage_ranks[s];
				return [s, r.first_rank + '\u2013' + (r.first_rank + r.ranks - 1), row.join(' ')];
			}), [1, 0, 0]);
			st.id = 'report-schedule';
			report.appendChild(st);
		}
		report.appendChild(el('h2', {}, 'Communication operators of rank ' + main.rank));
		var save = V;
		V = main;
		var ct = table(['operation', 'kind', 'category', 'group', 'bytes sent', 'time (us)', 'for'],
			main.comm.map(function (c) {
				return [link(c[0]), c[2], D.categories[c[3]], c[4], numCell(el('span', {}, human(c[5])), c[5]),
					us(c[6]), c[1] !== c[0] ? link(c[1]) : '-'];
			}), [0, 0, 0, 1, 1, 1, 0]);
		ct.id = 'report-comm';
		report.appendChild(ct);
		report.appendChild(el('h2', {}, 'Operators with a strategy (rank ' + main.rank + ', local shapes)'));
		var ops = [];
		var more = 0;
		for (var i = 0; i < main.nodes.length / main.fields; i++)
			if (S[rec(i, F.strat)]) {
				if (ops.length < 20000)
					ops.push([link(i), S[rec(i, F.op)], S[rec(i, F.strat)], S[rec(i, F.source)] || '-']);
				else
					more++;
			}
		report.appendChild(table(['operator', 'kind', 'strategy', 'source'], ops));
		if (more) /* a table this long is no use to read: the search finds the rest */
			report.appendChild(el('p', {'class': 'muted'}, more + ' more: search them in the graph'));
		V = save;
	}
	function showTab(rep) {
		tabReport.classList.toggle('on', rep);
		tabGraph.classList.toggle('on', !rep);
		report.style.display = rep ? 'block' : 'none';
		graph.style.display = rep ? 'none' : 'block';
		if (rep && !report.firstChild)
			buildReport();
	}
	tabGraph.addEventListener('click', function () { showTab(false); });
	tabReport.addEventListener('click', function () { showTab(true); });
	viewSel.addEventListener('change', function () {
		var sel = aside.querySelector('#panel-name');
		showView(+viewSel.value);
		if (sel) { /* the same operator in the other view, if it has it */
			var name = sel.textContent.replace(/^%\S* /, '');
			for (var i = 0; i < nodeCount; i++) if (fullName(i) === name) return reveal(i);
		}
	});

	/* the rank of --rank first */
	var first = 0;
	D.views.forEach(function (v, i) { if (v.rank === D.rank && v.name !== 'plan') first = i; });
	viewSel.value = first;
	showView(first);

	/* ---------------------------------------------------------- self-test */
	var arg = {};
	location.hash.replace(/^#/, '').split('&').forEach(function (kv) {
		var e = kv.indexOf('=');
		if (e > 0) arg[kv.slice(0, e)] = decodeURIComponent(kv.slice(e + 1));
	});
	if (arg.selftest !== undefined) {
		var out = {query: arg.selftest};
		if (arg.view !== undefined) {
			var want = arg.view;
			D.views.forEach(function (v, i) { if (v.name === want) viewSel.value = i; });
			showView(+viewSel.value);
		}
		out.view = V.name;
		out.groups = V.groups.length;
		search.value = out.query;
		search.dispatchEvent(new Event('input'));
		var hit = results.querySelector('div[data-node]');
		out.hits = results.querySelectorAll('div[data-node]').length;
		if (hit) {
			hit.click();
			out.name = document.getElementById('panel-name').textContent;
			out.strategy = document.getElementById('panel-strategy').textContent;
			out.source = document.getElementById('panel-source').textContent;
			out.tensors = document.getElementById('panel-tensors').textContent;
			out.phase = document.getElementById('panel-phase').textContent;
			var lv = document.getElementById('panel-levels');
			out.levels = lv ? lv.textContent : '';
			out.selected = document.querySelectorAll('#graph g.node.sel').length;
			out.comm = Array.prototype.map.call(document.querySelectorAll('#panel-comm tr'), function (tr) {
				return Array.prototype.map.call(tr.children, function (td) { return td.textContent; }).join(' | ');
			}).slice(1).join('; ');
			out.expanded = Object.keys(expanded).length;
		}
		showTab(true);
		out.report_rows = document.querySelectorAll('#report-totals tr').length;
		out.schedule_rows = document.querySelectorAll('#report-schedule tr').length;
		showTab(false);
		if (hit) reveal(+hit.getAttribute('data-node'));
		if (arg.zoom) { /* zoom out around the operator: its box drawn open among the others */
			var z = +arg.zoom;
			vb = [vb[0] + vb[2] / 2 * (1 - z), vb[1] + vb[3] / 2 * (1 - z), vb[2] * z, vb[3] * z];
			setVB();
		}
		if (arg.open === 'all') { /* every box opened, top first: each opens below the ones open above */
			for (var g = 0; g < V.groups.length; g++) expand(g);
			var ks = Object.keys(expanded), bad = 0;
			ks.forEach(function (a) {
				ks.forEach(function (b) {
					var A = toRoot(expanded[a].holder), B = toRoot(expanded[b].holder);
					if (expanded[a].cy < expanded[b].cy && A.y + A.h > B.y + 0.5) bad++;
				});
			});
			/* and each sits where its box's outline has moved to */
			ks.forEach(function (k) {
				var e = expanded[k], top = Infinity;
				e.box.querySelector('polygon').getAttribute('points').replace(/-?[\d.]+,(-?[\d.]+)/g,
					function (m, y) { top = Math.min(top, +y); });
				var ty = +/translate\([^,]*,([^)]*)\)/.exec(e.holder.getAttribute('transform'))[1];
				if (Math.abs(ty - top) > 0.5) bad++;
			});
			out.opened = ks.length;
			out.misplaced = bad;
		}
		out.viewbox = vb.map(Math.round).join(' ');
		out.ms = Math.round(performance.now()); /* since the page began to load */
		if (arg.tab === 'report') showTab(true);
		document.body.appendChild(el('pre', {id: 'selftest'}, JSON.stringify(out)));
	}
})();
