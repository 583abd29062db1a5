/* fleet's additions to Flower's pages (fleet/flower_view.py puts this at the end of every
   page): the Workers page shows each worker's GPUs and cores under its name, from the
   heartbeat the worker keeps in Redis (the ``fleet_resources`` field fleet adds to the rows),
   and a worker's own page the same line under its name;
   a task's page shows its exception with its own line breaks (the job's last output lines),
   and a pruned trial's end as "Pruned", not "Succeeded" (its task-pruned event sets the
   time field Celery names succeeded: a search's pruner stopped it early);
   the navigation bar links to fleet's searches;
   a gang's Worker cell (every member's host, "ga + gb") is plain text, not one worker's link. */
(function ($) {
    'use strict';
    $(function () {   // fleet's page of searches (fleet/flower_extras.py), beside Tasks and Broker
        var nav = $('.app-nav.navbar-nav').first();
        if (nav.length) {
            var item = $('<li class="nav-item"><a class="nav-link">Searches</a></li>');
            item.find('a').attr('href', ($('#url_prefix').val() || '') + '/fleet/searches');
            nav.append(item);
        }
    });
    $(function () {
        $('dt').filter(function () {
            return $(this).text().trim() === 'Exception';
        }).next('dd').each(function () {   // plain text: the template's indentation goes
            $(this).text($(this).text().trim()).css('white-space', 'pre-wrap');
        });
    });
    $(function () {
        function term(label) {
            return $('dt').filter(function () { return $(this).text().trim() === label; });
        }
        if (term('Status').next('dd').text().trim() === 'PRUNED') {
            term('Succeeded').text('Pruned');
        }
    });
    $(function () {
        var title = $('#workername');
        if (!title.length) {
            return;
        }
        $.getJSON($('#url_prefix').val() + '/workers?json=1', function (answer) {
            var row = (answer.data || []).find(function (w) { return w.hostname === title.text(); });
            if (row && row.fleet_resources) {
                title.after($('<p class="fleet-resources"></p>').text(row.fleet_resources));
            }
        });
    });
    $(function () {
        var table = $('#workers-table');
        if (!table.length || !$.fn.dataTable.isDataTable(table)) {
            return;
        }
        table.on('draw.dt', function () {
            table.DataTable().rows().every(function () {
                var data = this.data(), cell = $(this.node()).children('td').first();
                if (data && data.fleet_resources && !cell.find('.fleet-resources').length) {
                    cell.append($('<span class="fleet-resources"></span>').text(data.fleet_resources));
                }
            });
        });
    });
    function unlinkGangs(root) {   // a gang's hosts ("ga + gb") are no one worker's page
        root.find('a[href*="/worker/"]').filter(function () {
            return $(this).text().indexOf(' + ') >= 0 || ($(this).attr('title') || '').indexOf(' + ') >= 0;
        }).each(function () {
            var hosts = $(this).attr('title') || $(this).text().trim();
            $(this).replaceWith($('<span class="fleet-gang-hosts"></span>').text(hosts));
        });
    }
    $(function () {
        var table = $('#tasks-table');
        if (table.length) {
            table.on('draw.dt', function () { unlinkGangs(table); });
        } else {
            unlinkGangs($('main, body').first());   // a task's own page
        }
    });
}(jQuery));
