/* fleet's additions to Flower's pages (fleet/flower_view.py puts this at the end of every
   page): the Workers page shows each worker's GPUs and cores under its name, from the
   heartbeat the worker keeps in Redis (the ``fleet_resources`` field fleet adds to the rows). */
(function ($) {
    'use strict';
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
}(jQuery));
