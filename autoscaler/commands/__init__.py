"""The ``gpu-autoscaler`` command line: ``cli`` is the group (and ``serve``, ``check-config``);
``backtest``, ``forecast`` and ``simulate`` are one command each; ``progress`` draws progress bars."""
