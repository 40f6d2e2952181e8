"""ksearch.kernels"""
