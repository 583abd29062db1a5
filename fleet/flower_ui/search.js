/* fleet's live search page in Flower (fleet/flower_extras.py serves it): polls the search's
   JSON (fleet/query/searchpage.py) and draws its budget, failures and stop reason, its
   leaderboard as `fleet results` ranks it, and every trial's learning curve as SVG paths
   (pruned and failed trials faint, the best one red and on top). A PBT search also gets its
   exploits crossed on the curves, its population (each member's phase, what it is doing, its
   lineage) and each value over the steps per member. No library: plain DOM. */
(function () {
    'use strict';
    var EVERY_MS = 2000, W = 1340, H = 420, M = {left: 70, right: 20, top: 16, bottom: 40};
    var SVG = 'http://www.w3.org/2000/svg';
    var root = document.getElementById('fleet-search');
    var url = root.getAttribute('data-url');

    function el(tag, attrs, text, ns) {
        var node = ns ? document.createElementNS(SVG, tag) : document.createElement(tag);
        Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
        if (text !== undefined && text !== null) { node.textContent = String(text); }
        return node;
    }
    function svg(tag, attrs, text) { return el(tag, attrs, text, true); }
    function short(v) {  // as `fleet results` writes a value (Python's "%.4g")
        if (v === null || v === undefined) { return ''; }
        var s = Number(v).toPrecision(4);
        return String(Number(s)) === s ? s : String(Number(s));
    }
    function fill(id, node) {
        var box = document.getElementById(id);
        box.replaceChildren(node);
    }

    function facts(d) {
        var b = d.budget, f = d.failures, dl = el('dl', {'class': 'fleet-facts'});
        var stop = d.stopped ? d.stopped : (d.done ? 'done: every trial it issued ended' : 'running');
        [
            ['trials', b.issued + ' issued of ' + b.trials + ', ' + b.ended + ' ended'],
            ['now', b.running + ' running, ' + b.queued + ' queued (at most ' + b.parallel + ' at once)'],
            ['ended', ['succeeded', 'pruned', 'failed', 'cancelled'].map(function (s) {
                return (d.counts[s] || 0) + ' ' + s;
            }).join(', ')],
            ['failures', f.failed + ' failed' + (f.max !== null && f.max !== undefined ? ' (the search stops after ' + f.max + ' in a row)' : '')],
            ['stop', stop],
            ['metric', d.metric + ' (' + d.direction + ')'],
        ].forEach(function (row) {
            dl.appendChild(el('dt', {}, row[0]));
            dl.appendChild(el('dd', {'data-fact': row[0]}, row[1]));
        });
        return dl;
    }

    function board(d) {
        var table = el('table', {'class': 'table table-sm fleet-board'});
        var head = el('tr');
        ['#', 'trial', 'state', d.metric, 'best ' + d.metric, 'steps', 'host', 'params'].forEach(function (h) {
            head.appendChild(el('th', {}, h));
        });
        table.appendChild(el('thead')).appendChild(head);
        var body = table.appendChild(el('tbody'));
        d.leaderboard.forEach(function (t, i) {
            var row = el('tr', {'data-trial': t.trial, 'class': 'state-' + t.state + (t.best ? ' best' : '')});
            var params = Object.keys(t.params || {}).map(function (k) {
                var p = t.params[k];  // a float as `fleet results` writes it (4 digits)
                return k + '=' + (typeof p === 'string' ? p
                    : (typeof p === 'number' && !Number.isInteger(p)) ? short(p) : JSON.stringify(p));
            }).join(', ');
            [i + 1, t.trial, t.state, short(t.value), short(t.best_value), t.steps, t.host, params].forEach(function (v) {
                row.appendChild(el('td', {}, v));
            });
            body.appendChild(row);
        });
        return table;
    }

    function scale(lo, hi, a, b, log) {
        var f = log ? Math.log10 : function (v) { return v; };
        var l = f(lo), h = f(hi);
        if (h === l) { l -= 0.5; h += 0.5; }
        return function (v) { return a + (f(v) - l) / (h - l) * (b - a); };
    }
    function ticks(lo, hi, log) {
        if (log) {
            var out = [];
            for (var e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
                var t = Math.pow(10, e);
                if (t >= lo && t <= hi) { out.push(t); }
            }
            return out.length >= 2 ? out : [lo, hi];
        }
        if (hi === lo) { return [lo]; }
        // a round step (1, 2 or 5 times a power of ten) giving about five ticks
        var raw = (hi - lo) / 5, mag = Math.pow(10, Math.floor(Math.log10(raw)));
        var step = [1, 2, 5, 10].map(function (m) { return m * mag; })
            .filter(function (s) { return s >= raw; })[0];
        var ticksOut = [];
        for (var v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) {
            ticksOut.push(Number(v.toPrecision(12)));
        }
        return ticksOut;
    }

    // a chart's axes over the points (xs, ys) in box f (its size and margins): the scales,
    // a log metric axis when its values span decades, the lines and ticks drawn in box
    function framed(box, xs, ys, f) {
        var xlo = Math.min.apply(null, xs), xhi = Math.max.apply(null, xs);
        var ylo = Math.min.apply(null, ys), yhi = Math.max.apply(null, ys);
        var log = ylo > 0 && yhi / ylo >= 100;
        var x = scale(xlo, xhi, f.left + f.pad, f.w - f.right, false);
        var y = scale(ylo, yhi, f.h - f.bottom - f.padY, f.top + f.padY, log);
        var axes = box.appendChild(svg('g', {'class': 'fleet-axes'}));
        axes.appendChild(svg('line', {x1: f.left, y1: f.h - f.bottom, x2: f.w - f.right, y2: f.h - f.bottom}));
        axes.appendChild(svg('line', {x1: f.left, y1: f.top, x2: f.left, y2: f.h - f.bottom}));
        ticks(xlo, xhi, false).forEach(function (t) {
            axes.appendChild(svg('text', {x: x(t), y: f.h - f.bottom + f.below, 'text-anchor': 'middle'}, short(t)));
        });
        ticks(ylo, yhi, log).forEach(function (t) {
            axes.appendChild(svg('text', {x: f.left - 6, y: y(t) + 4, 'text-anchor': 'end'}, short(t)));
        });
        return {x: x, y: y, log: log, axes: axes};
    }

    function chart(d) {
        var curves = d.curves.filter(function (c) { return c.steps.length; });
        var box = svg('svg', {width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, 'class': 'fleet-chart'});
        if (!curves.length) {
            box.appendChild(svg('text', {x: W / 2, y: H / 2, 'text-anchor': 'middle'}, 'no metric lines yet'));
            return box;
        }
        var xs = [], ys = [];
        curves.forEach(function (c) { xs = xs.concat(c.steps); ys = ys.concat(c.values); });
        var frame = framed(box, xs, ys, {w: W, h: H, left: M.left, right: M.right, top: M.top,
            bottom: M.bottom, pad: 8, padY: 6, below: 16});
        var x = frame.x, y = frame.y, log = frame.log, axes = frame.axes;
        axes.appendChild(svg('text', {x: (W + M.left) / 2, y: H - 6, 'text-anchor': 'middle'}, 'step'));
        axes.appendChild(svg('text', {x: 14, y: M.top + 8, 'text-anchor': 'start'},
            d.metric + (log ? ' (log)' : '')));
        // faint first, then the others, the best last: on top
        var order = function (c) { return c.best ? 2 : (c.dimmed ? 0 : 1); };
        curves.slice().sort(function (a, b) { return order(a) - order(b); }).forEach(function (c) {
            var path = c.steps.map(function (s, i) {
                return (i ? 'L' : 'M') + x(s).toFixed(1) + ' ' + y(c.values[i]).toFixed(1);
            }).join(' ');
            var kind = c.best ? 'best' : (c.dimmed ? 'dimmed' : 'live');
            if (c.steps.length === 1) {  // one step: a dot (a round cap on a zero-length line)
                path += ' l 0.01 0';
                kind += ' dot';
            }
            var p = box.appendChild(svg('path', {d: path, 'class': 'fleet-curve ' + kind,
                'data-trial': c.trial, 'data-state': c.state}));
            p.appendChild(svg('title', {}, 'trial ' + c.trial + ' (' + c.state + ')'));
        });
        ((d.pbt && d.pbt.marks) || []).forEach(function (m) {  // a PBT exploit: a cross
            if (m.value === null || m.value === undefined) { return; }
            var cx = x(m.step), cy = y(m.value), r = 5;
            var mark = box.appendChild(svg('path', {'class': 'fleet-mark', 'data-member': m.trial,
                d: 'M' + (cx - r) + ' ' + (cy - r) + ' L' + (cx + r) + ' ' + (cy + r)
                    + ' M' + (cx - r) + ' ' + (cy + r) + ' L' + (cx + r) + ' ' + (cy - r)}));
            mark.appendChild(svg('title', {}, 'step ' + m.step + ': member ' + m.trial
                + ' took member ' + m.donor + "'s checkpoint"));
        });
        return box;
    }

    // one value over the steps, per member: a step line each, the best member red
    function scheduleChart(s) {
        var w = 440, h = 220, m = {left: 60, right: 10, top: 22, bottom: 28};
        var box = svg('svg', {width: w, height: h, viewBox: '0 0 ' + w + ' ' + h,
            'class': 'fleet-chart', 'data-value': s.name});
        box.appendChild(svg('text', {x: m.left, y: 14}, s.name + ' over the steps'));
        if (!s.numeric) {
            box.appendChild(svg('text', {x: m.left, y: h / 2}, 'choices: see each member\'s lineage'));
            return box;
        }
        var xs = [], ys = [];
        s.members.forEach(function (p) { xs = xs.concat(p.steps); ys = ys.concat(p.values); });
        var frame = framed(box, xs, ys, {w: w, h: h, left: m.left, right: m.right, top: m.top,
            bottom: m.bottom, pad: 0, padY: 0, below: 14});
        var x = frame.x, y = frame.y;
        s.members.slice().sort(function (a, b) { return (a.member === s.best) - (b.member === s.best); })
            .forEach(function (p) {
                var path = 'M' + x(p.steps[0]).toFixed(1) + ' ' + y(p.values[0]).toFixed(1);
                for (var i = 1; i < p.steps.length; i++) {
                    path += ' H' + x(p.steps[i]).toFixed(1) + ' V' + y(p.values[i]).toFixed(1);
                }
                var line = box.appendChild(svg('path', {d: path, 'data-member': p.member,
                    'class': 'fleet-curve ' + (p.member === s.best ? 'best' : 'live')}));
                line.appendChild(svg('title', {}, 'member ' + p.member));
            });
        return box;
    }

    function population(d) {
        var part = el('div');
        var p = d.pbt;
        part.appendChild(el('h2', {}, 'population: ' + p.members.length + ' members, '
            + p.exploits + ' exploit' + (p.exploits === 1 ? '' : 's')));
        var charts = part.appendChild(el('div', {'class': 'fleet-schedules'}));
        p.schedules.forEach(function (s) { charts.appendChild(scheduleChart(s)); });
        var table = part.appendChild(el('table', {'class': 'table table-sm fleet-board fleet-pbt'}));
        var head = el('tr');
        ['member', 'phase', 'doing', 'values now', 'lineage'].forEach(function (h) {
            head.appendChild(el('th', {}, h));
        });
        table.appendChild(el('thead')).appendChild(head);
        var body = table.appendChild(el('tbody'));
        p.members.forEach(function (m) {
            var row = body.appendChild(el('tr', {'data-member': m.member, 'data-phase': m.phase}));
            var values = Object.keys(m.values).map(function (k) {
                var v = m.values[k];
                return k + '=' + (typeof v === 'number' ? short(v) : JSON.stringify(v));
            }).join(', ');
            [m.member, m.phase, m.doing, values].forEach(function (v) { row.appendChild(el('td', {}, v)); });
            var cell = row.appendChild(el('td', {'class': 'fleet-pbt-lineage'}));
            if (!m.lineage.length) { cell.textContent = 'kept its own values'; }
            m.lineage.forEach(function (e) { cell.appendChild(el('div', {}, e.text)); });
        });
        return part;
    }

    function render(d) {
        document.getElementById('fleet-summary').textContent = d.summary;
        fill('fleet-facts', facts(d));
        fill('fleet-chart', chart(d));
        fill('fleet-board', board(d));
        if (d.pbt) { fill('fleet-pbt', population(d)); }
        var best = d.curves.filter(function (c) { return c.best; })[0];
        document.getElementById('fleet-legend').textContent =
            (best ? 'red: the best, trial ' + best.trial + '; ' : '') + 'blue: succeeded or running; grey: pruned, failed or cancelled'
            + (d.pbt ? '; a cross: an exploit (the member took a better member\'s checkpoint there)' : '');
        root.setAttribute('data-drawn', String(Date.now()));
    }

    function poll() {
        var req = new XMLHttpRequest();
        req.open('GET', url);
        req.onload = function () {
            var problem = document.getElementById('fleet-problem');
            if (req.status === 200) {
                problem.textContent = '';
                render(JSON.parse(req.responseText));
            } else {
                problem.textContent = 'fleet answered ' + req.status + ': ' + req.responseText.slice(0, 200);
            }
            setTimeout(poll, EVERY_MS);
        };
        req.onerror = function () {
            document.getElementById('fleet-problem').textContent = 'cannot reach Flower; trying again';
            setTimeout(poll, EVERY_MS);
        };
        req.send();
    }
    poll();
}());
