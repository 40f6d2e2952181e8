"""ksearch.integrations"""
