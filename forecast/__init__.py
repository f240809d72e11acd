"""Pure, synchronous forecasting numerics. Never imports aiohttp, adapters or autoscaler."""
