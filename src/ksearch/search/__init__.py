"""ksearch.search"""
