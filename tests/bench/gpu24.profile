# a 24 GB PCIe GPU of the RTX 4090's figures: 82.6 TFLOP/s fp32 and 1.01 TB/s
# (80% sustained), 24 GB, no peer access, PCIe 4.0 x16 to host memory
flops = 6.6e13
matrix_flops = 6.6e13
tf32_flops = 5.8e13
bandwidth = 8.1e11
memory = 24e9
peer_access = 0
host_bandwidth = 2.5e10
host_latency = 1e-5
