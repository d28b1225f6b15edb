"""prep"""
