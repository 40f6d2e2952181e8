"""ksearch.knowledge"""
