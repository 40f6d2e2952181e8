"""ksearch.models"""
